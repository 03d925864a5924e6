// tiles.cuh: the output tile of v2, v3, v4 and v14-v17 (TILE x TILE threads a block) and the input
// span it stages (TILE + K - 1 on a side).
#pragma once
#include "common.cuh"

#ifndef TILE
#define TILE 16            // v2-v4: output tile edge (TILE x TILE threads)
#endif

#define V4_SPAN (TILE + CONV_K - 1)
