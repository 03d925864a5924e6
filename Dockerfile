# The course container: CUDA toolkit, Python 3 and ece408_op (MXNet 1.9.1, NumPy < 2, Numba, PyCUDA),
# Fashion-MNIST baked into /fashion-mnist and the models into /models, as the course image had them.
#
#   docker build -t ece408_op .                      # GPU image (CUDA 13, Python 3.12)
#   docker run --rm --gpus all ece408_op             # runs `final` (ece408-high, 10,000 images)
#   docker build --build-arg BASE_IMAGE=debian:bookworm --build-arg GPU=0 -t ece408_op:cpu .
#
# BASE_IMAGE: any Debian or Ubuntu image with apt; the default is NVIDIA's CUDA devel image
# (nvcc for PyCUDA's kernels). GPU=1 installs the gpu extra (MXNet, NumPy, Numba, PyCUDA); GPU=0
# the mxnet extra (no PyCUDA, no compilers).
# Behind a TLS-inspecting proxy, give its CA bundle as a build secret (never stored in a layer):
#   docker build --secret id=cacert,src=/etc/ssl/certs/ca-certificates.crt -t ece408_op .
ARG BASE_IMAGE=nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04
FROM ${BASE_IMAGE}

ARG GPU=1
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/ece408 \
    PATH=/opt/ece408/bin:$PATH \
    ECE408_MODEL_DIR=/models

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Python 3 in a virtual env (no pip in the system Python: PEP 668), the libraries libmxnet.so links to;
# compilers only for PyCUDA.
# Unpinned: the base is a build argument, so the available versions differ from base to base.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libgomp1 libquadmath0 python3 python3-venv \
 && if [ "$GPU" = 1 ]; then apt-get install -y --no-install-recommends python3-dev g++ make; fi \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv "$VIRTUAL_ENV"

# The dependencies alone, from setup.py and its table of requirements only, so that this layer
# survives code changes (the "package" here is the local folder, nothing in it yet).
# The checkpoints are a distribution of their own (models/setup.py) that the extras need: installed
# here with them, into $VIRTUAL_ENV/share/ece408_op/models, and seen at /models as in the course image.
WORKDIR /opt/src
COPY setup.py ./
COPY ece408_op/base/extras.py ./ece408_op/base/
COPY models/ ./models/
# hadolint ignore=DL3013
RUN --mount=type=secret,id=cacert \
    ca=/run/secrets/cacert; if [ -s "$ca" ]; then export PIP_CERT="$ca" REQUESTS_CA_BUNDLE="$ca"; fi \
 && pip install --no-cache-dir ./models ".[$(if [ "$GPU" = 1 ]; then echo gpu; else echo mxnet; fi)]" \
 && pip uninstall -y ece408_op \
 && rm -rf ./models \
 && ln -s "$VIRTUAL_ENV/share/ece408_op/models" /models

# The package itself (no dependencies left to fetch), then the data through its own fetcher.
COPY README.md ./
COPY ece408_op/ ./ece408_op/
RUN --mount=type=secret,id=cacert \
    ca=/run/secrets/cacert; if [ -s "$ca" ]; then export PIP_CERT="$ca" REQUESTS_CA_BUNDLE="$ca"; fi \
 && pip install --no-cache-dir --no-deps . \
 && rm -rf /opt/src/* \
 && python -m ece408_op fetch --dest /fashion-mnist --quiet

# Students' builds run as an unprivileged user in /build, as on the course's servers.
RUN useradd --create-home --no-log-init --uid 10001 ece408 \
 && install -d -o ece408 -g ece408 /build /src
USER 10001
# The CPU path's Numba kernels, compiled into the user's cache folder (~/.cache/ece408_op/numba) now
# rather than on the first run; a machine with another CPU compiles them again (the cache is keyed by it).
RUN python -m ece408_op warmup
WORKDIR /build
CMD ["python", "-m", "ece408_op", "final"]
