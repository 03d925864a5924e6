"""Networks built with torch.nn (torchvision's layer shapes, random weights, no torchvision needed) and
their distinct convolutions: ResNet-18 and ResNet-50 (torchvision's v1.5: the stride on the 3x3 of a
bottleneck), VGG-16 and MobileNetV2, for ``bench gpu --network`` (bench/network_layers.py) and its precompile."""
NETWORK_BATCH = {"resnet18": 64, "resnet50": 64, "vgg16": 32, "mobilenet_v2": 64}


def _nn():
    import torch
    return torch, torch.nn


def resnet(depth):
    """ResNet-18 (basic blocks) or ResNet-50 (bottlenecks, stride on the 3x3 as torchvision's v1.5)."""
    torch, nn = _nn()
    bottleneck = depth == 50
    blocks = {18: (2, 2, 2, 2), 50: (3, 4, 6, 3)}[depth]
    expansion = 4 if bottleneck else 1

    class Block(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * expansion
            if bottleneck:
                self.body = nn.Sequential(
                    nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                    nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                    nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            else:
                self.body = nn.Sequential(
                    nn.Conv2d(cin, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                    nn.Conv2d(width, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width))
            self.down = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.body(x) + (x if self.down is None else self.down(x)))

    layers, cin = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                   nn.MaxPool2d(3, 2, 1)], 64
    for stage, count in enumerate(blocks):
        width = 64 << stage
        for i in range(count):
            layers.append(Block(cin, width, 2 if i == 0 and stage > 0 else 1))
            cin = width * expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    return nn.Sequential(*layers)


def vgg16():
    torch, nn = _nn()
    layers, cin = [], 3
    for v in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU(inplace=True)]
            cin = v
    layers += [nn.AdaptiveAvgPool2d(7), nn.Flatten(), nn.Linear(512 * 49, 4096), nn.ReLU(inplace=True),
               nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Linear(4096, 1000)]
    return nn.Sequential(*layers)


def mobilenet_v2():
    torch, nn = _nn()

    def cbr(cin, cout, k, stride=1, groups=1, relu=True):
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return layers + [nn.ReLU6(inplace=True)] if relu else layers

    class Inverted(nn.Module):
        def __init__(self, cin, cout, stride, t):
            super().__init__()
            hidden = cin * t
            layers = (cbr(cin, hidden, 1) if t != 1 else []) + cbr(hidden, hidden, 3, stride, hidden) + \
                cbr(hidden, cout, 1, relu=False)
            self.body, self.residual = nn.Sequential(*layers), stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    layers, cin = cbr(3, 32, 3, 2), 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)):
        for i in range(n):
            layers.append(Inverted(cin, c, s if i == 0 else 1, t))
            cin = c
    layers += cbr(cin, 1280, 1) + [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 1000)]
    return nn.Sequential(*layers)


NETWORKS = {"resnet18": lambda: resnet(18), "resnet50": lambda: resnet(50), "vgg16": vgg16,
            "mobilenet_v2": mobilenet_v2}


def conv_layers(model, x):
    """[(names, conv module, input shape)] of the distinct convolutions of ``model`` on ``x`` (in order;
    names: every module name with that configuration and input shape)."""
    torch, nn = _nn()
    seen, hooks = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d):
            def hook(mod, args, name=name):
                key = (tuple(args[0].shape), mod.in_channels, mod.out_channels, mod.kernel_size, mod.stride,
                       mod.padding, mod.dilation, mod.groups, mod.bias is not None)
                seen.setdefault(key, ([], mod, tuple(args[0].shape)))[0].append(name)
            hooks.append(module.register_forward_pre_hook(hook))
    with torch.inference_mode():
        model(x)
    for h in hooks:
        h.remove()
    return list(seen.values())


def describe(conv, shape):
    k, s, g = conv.kernel_size, conv.stride, conv.groups
    kind = "dw " if g > 1 and g == conv.in_channels else ""
    return (f"{kind}{k[0]}x{k[1]}/{s[0]} {conv.in_channels}->{conv.out_channels} {shape[2]}x{shape[3]}"
            + (f" g{g}" if g > 1 and not kind else ""))
