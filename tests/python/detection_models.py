"""torchvision's detection models and a scripted list-building function, exported to ONNX with
their PyTorch references, for tests/python/test_control_flow.py and bench/detection.py.

    /usr/bin/python3 tests/python/detection_models.py [NAME ...] [--opset N]

Detection models export If (batched NMS, the RoiAlign level squeeze) and, for Mask R-CNN, a Loop
(pasting each mask into the image); the list builder exports Loop with SequenceEmpty, SequenceInsert
and ConcatFromSequence. The input is one image [3, 320, 320] (torchvision's detectors take a list
of images, so the exported graph has no batch axis), uniform in [0, 1) from a fixed seed.

Random weights give no detections (the box classifier's scores sit at 1/91, under the 0.05 score
threshold). Mask R-CNN's (frozen) statistics give 100 detections of distinct scores as it is;
Faster R-CNN is calibrated: BatchNorm statistics recomputed over random images as the model's
transform normalizes them (computed on raw images, they leave activations so large that PyTorch at 1
and 2 threads disagrees on the detections), and the box classifier scaled so that 98 boxes of
distinct scores survive NMS. Deterministic."""
import argparse
import os
import pathlib
import sys

import numpy as np
import onnx
import torch
import torchvision

FASTERRCNN = "fasterrcnn_mobilenet_v3_large_320_fpn"
MASKRCNN = "maskrcnn_resnet50_fpn"
LIST_BUILDER = "list_builder"
DETECTORS = [FASTERRCNN, MASKRCNN]
MODELS = DETECTORS + [LIST_BUILDER]
SIZE = 320
SEED = 0
EXPORT_VERSION = 1
# What the detectors' postprocessing decides by threshold (torchvision's defaults).
SCORE_THRESHOLD = 0.05
NMS_IOU = 0.5
DETECTIONS = 100


@torch.jit.script
def build_lists(x: torch.Tensor):
    scaled = []
    shifted = []
    for i in range(x.shape[0] + 2):
        scaled.append(x * (i + 1))
        shifted.append(x[0] + i)
    return torch.cat(scaled, 0), torch.stack(shifted, 0)


class ListBuilder(torch.nn.Module):
    """Appends to two lists in a loop of x.shape[0] + 2 iterations (a scripted loop: Loop with
    sequence-carried values in ONNX) and returns their concatenation and their stack."""

    def forward(self, x):
        return build_lists(x)


def image():
    return torch.rand(3, SIZE, SIZE, generator=torch.Generator().manual_seed(SEED + 3))


def build(name):
    """The eval-mode module and its example input."""
    torch.manual_seed(SEED)
    if name == LIST_BUILDER:
        return ListBuilder().eval(), torch.rand(3, 4, generator=torch.Generator().manual_seed(SEED + 1))
    kwargs = {"weights": None, "weights_backbone": None}
    if name == MASKRCNN:
        kwargs.update(min_size=SIZE, max_size=SIZE)  # the default 800 would upscale the 320 image
    model = getattr(torchvision.models.detection, name)(**kwargs).eval()
    if name == FASTERRCNN:
        calibrate_fasterrcnn(model)
    return model, image()


def calibrate_fasterrcnn(model):
    generator = torch.Generator().manual_seed(SEED + 2)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for norm in norms:
            norm.reset_running_stats()
            norm.momentum = None  # cumulative average
        model.backbone.train()
        for _ in range(2):
            # As inference feeds the backbone: normalized and resized by the model's transform.
            images, _ = model.transform([torch.rand(3, SIZE, SIZE, generator=generator) for _ in range(2)])
            model.backbone(images.tensors)
        model.eval()
        predictor = model.roi_heads.box_predictor
        for layer, scale in ((predictor.cls_score, 9.0), (predictor.bbox_pred, 0.01)):
            layer.weight *= scale
            layer.bias *= scale


def rpn_head_outputs(model, example):
    """PyTorch's detections for `example` and the RPN head's outputs (objectness and box deltas per
    feature level: what every proposal and NMS decision is made from)."""
    captured = {}

    def keep(module, inputs, output):
        captured["objectness"], captured["deltas"] = output

    handle = model.rpn.head.register_forward_hook(keep)
    try:
        with torch.no_grad():
            detections = model([example])[0]
    finally:
        handle.remove()
    head = {}
    for level, (objectness, deltas) in enumerate(zip(captured["objectness"], captured["deltas"])):
        suffix = "" if level == 0 else f"_{level}"
        head[f"/rpn/head/cls_logits{suffix}/Conv_output_0"] = objectness.numpy()
        head[f"/rpn/head/bbox_pred{suffix}/Conv_output_0"] = deltas.numpy()
    return {k: v.numpy() for k, v in detections.items()}, head


def export(name, path, opset):
    model, example = build(name)
    if name == LIST_BUILDER:
        torch.onnx.export(model, (example,), str(path), opset_version=opset, input_names=["x"],
                          output_names=["cat", "stack"], dynamic_axes={"x": {0: "n"}})
        return
    outputs = ["boxes", "labels", "scores"] + (["masks"] if name == MASKRCNN else [])
    torch.onnx.export(model, ([example],), str(path), opset_version=opset, input_names=["image"],
                      output_names=outputs)
    # The RPN head's outputs become graph outputs too, so parity checks what precedes every NMS.
    proto = onnx.load(str(path))
    _, head = rpn_head_outputs(model, example)
    for value in head:
        proto.graph.output.append(onnx.helper.make_tensor_value_info(value, onnx.TensorProto.FLOAT, None))
    onnx.save(proto, str(path))


def cached_export(name, opset, cache_dir=None):
    """Path of `name` exported at `opset` in $KILN_MODEL_CACHE (default /tmp/kiln-models), exporting
    it first (to a per-process name, renamed into place) if needed."""
    folder = pathlib.Path(cache_dir or os.environ.get("KILN_MODEL_CACHE", "/tmp/kiln-models"))
    path = folder / f"{name}_opset{opset}_v{EXPORT_VERSION}.onnx"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        try:
            export(name, partial, opset)
            partial.replace(path)
        finally:
            partial.unlink(missing_ok=True)
    return path


def box_iou(a, b):
    """IoU of every box in a [N, 4] against every box in b [M, 4] (x1, y1, x2, y2)."""
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    low = np.maximum(a[:, None, :2], b[None, :, :2])
    high = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(high - low, 0, None), axis=2)
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-12)


def undecidable(detections, epsilon):
    """Indexes of detections whose survival a difference of `epsilon` can flip: a score within epsilon
    of the score threshold or of the last kept score, or an IoU within epsilon of the NMS threshold
    with another detection of its label."""
    scores, labels, boxes = detections["scores"], detections["labels"], detections["boxes"]
    fragile = set(np.nonzero(np.abs(scores - SCORE_THRESHOLD) < epsilon)[0].tolist())
    if len(scores) == DETECTIONS:
        fragile |= set(np.nonzero(np.abs(scores - scores.min()) < epsilon)[0].tolist())
    iou = box_iou(boxes, boxes)
    for i in range(len(scores)):
        for j in range(len(scores)):
            if i != j and labels[i] == labels[j] and abs(iou[i, j] - NMS_IOU) < epsilon:
                fragile |= {i, j}
    return fragile


def match_detections(expected, actual, epsilon=1e-3, min_iou=0.99, box_tolerance=1e-2, score_tolerance=1e-4,
                     allowed_unmatched=0):
    """Matches every expected detection not undecidable() to an actual one of the same label whose box
    has an IoU above min_iou with it or lies within box_tolerance pixels (random weights draw boxes a
    twentieth of a pixel wide, whose IoU a 1e-3 pixel difference moves by 2%), the closest; its box
    must lie within box_tolerance and its score within score_tolerance. `allowed_unmatched` detections
    may have no match at all: decisions the outputs do not show (the RPN's top-k cut, its NMS) can
    flip on rounding too. Returns what did not match (empty when everything did)."""
    problems = []
    unmatched = []
    fragile = undecidable(expected, epsilon)
    unmatched_actual = set(range(len(actual["scores"])))
    iou = box_iou(expected["boxes"], actual["boxes"])
    for i in range(len(expected["scores"])):
        distance = {j: float(np.abs(actual["boxes"][j] - expected["boxes"][i]).max()) for j in unmatched_actual
                    if actual["labels"][j] == expected["labels"][i]}
        candidates = [j for j in distance if iou[i, j] > min_iou or distance[j] <= box_tolerance]
        if not candidates:
            if i not in fragile:
                unmatched.append(f"detection {i} (label {expected['labels'][i]}, score {expected['scores'][i]:.6f}, "
                                f"box {expected['boxes'][i]}) has no match")
            continue
        j = min(candidates, key=lambda c: distance[c])
        unmatched_actual.discard(j)
        if distance[j] > box_tolerance:
            problems.append(f"detection {i}: box {actual['boxes'][j]} vs {expected['boxes'][i]}")
        if abs(actual["scores"][j] - expected["scores"][i]) > score_tolerance:
            problems.append(f"detection {i}: score {actual['scores'][j]} vs {expected['scores'][i]}")
    if len(unmatched) > allowed_unmatched:
        problems += unmatched
    if len(unmatched_actual) > len(fragile) + len(unmatched):
        problems.append(f"{len(unmatched_actual)} detections match none of PyTorch's ({len(fragile)} undecidable there)")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"one of {', '.join(MODELS)} (default: all)")
    parser.add_argument("--opset", type=int, default=11)
    args = parser.parse_args()
    for name in args.names:
        if name not in MODELS:
            parser.error(f"unknown model '{name}' (known: {', '.join(MODELS)})")
    for name in args.names or MODELS:
        print(cached_export(name, args.opset), flush=True)


if __name__ == "__main__":
    sys.exit(main())
