"""How close int8 comes to fp32: each model quantized by kiln.quantization.quantize_static (QDQ,
int8 activations and weights, MinMax over seeded random calibration images), then run on held-out
images by kiln and by ONNX Runtime (npm onnxruntime-node, CPU) with its defaults and with its exact
int8 mode (session.x64quantprecision=1, which matters on CPUs without VNNI), all on the same QDQ file.
Per runtime: SQNR of the int8 output against kiln's fp32 output of the float model (dB, over all
held-out outputs) and how often the arg-max agrees. Also, for kiln, how many Conv and Gemm steps run
as integer steps. The models have random weights (tests/python/export_models.py): the comparison is
between runtimes on the same quantized file, not a published accuracy.

    /usr/bin/python3 bench/int8_accuracy.py [--models resnet18,mobilenet_v2,resnet50] [--calibration 8]
                                            [--held-out 16] [--per-channel] [--kiln build/kiln]
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "build" / "python"))
import export_models  # noqa: E402
import kiln  # noqa: E402
import qdq_models  # noqa: E402
from machine import machine_lines  # noqa: E402


def sqnr_db(reference, value):
    noise = np.sum((reference.astype(np.float64) - value) ** 2)
    return float(10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / max(noise, 1e-30)))


def ort_outputs(model, images, folder, config):
    inputs, outputs = folder / "inputs.raw", folder / "outputs.raw"
    np.ascontiguousarray(images, np.float32).tofile(inputs)
    command = ["node", str(REPO / "bench" / "ort_outputs.js"), str(model), str(inputs), str(outputs)]
    for entry in config:
        command += ["--config", entry]
    info = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    return np.fromfile(outputs, np.float32).reshape([info["outputs"]] + info["output_shape"])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18,mobilenet_v2,resnet50")
    parser.add_argument("--calibration", type=int, default=8)
    parser.add_argument("--held-out", type=int, default=16)
    parser.add_argument("--per-channel", action="store_true")
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    args = parser.parse_args()
    print("\n".join(machine_lines(args.kiln)))
    print(f"calibration: {args.calibration} images, held out: {args.held_out}, per_channel={args.per_channel}")
    print("| model | integer Conv/Gemm steps | kiln SQNR dB | ORT default SQNR dB | ORT exact SQNR dB | "
          "arg-max agreement kiln / ORT default / ORT exact |")
    print("|---|---|---|---|---|---|")
    for name in args.models.split(","):
        path = export_models.cached_export(name)
        shape = export_models.input_shape(name)
        # Held-out images from the calibration's generator, after its images.
        rng = np.random.default_rng(11)
        rng.standard_normal((args.calibration, *shape))
        images = np.stack([rng.standard_normal(shape).astype(np.float32) for _ in range(args.held_out)])
        qdq = qdq_models.quantized_model(name, path, args.per_channel, args.calibration)
        with tempfile.TemporaryDirectory() as folder:
            folder = pathlib.Path(folder)
            reference = np.stack([kiln.Session(path).run({"input": x})["output"] for x in images])
            session = kiln.Session(qdq)
            steps = session.explain({"input": images[0]})
            convs = sum(1 for s in steps if s["op"] in ("Conv", "QLinearConv", "Gemm", "QGemm"))
            integer = sum(1 for s in steps if s["op"] in ("QLinearConv", "QGemm"))
            results = {"kiln": np.stack([session.run({"input": x})["output"] for x in images])}
            results["ort"] = ort_outputs(qdq, images, folder, [])
            results["ort_exact"] = ort_outputs(qdq, images, folder, ["session.x64quantprecision=1"])
        sqnr = {k: sqnr_db(reference, v.reshape(reference.shape)) for k, v in results.items()}
        agree = {k: float(np.mean(np.argmax(v.reshape(reference.shape), -1) == np.argmax(reference, -1)))
                 for k, v in results.items()}
        print(f"| {name} | {integer} of {convs} | {sqnr['kiln']:.2f} | {sqnr['ort']:.2f} | {sqnr['ort_exact']:.2f} | "
              f"{agree['kiln']:.0%} / {agree['ort']:.0%} / {agree['ort_exact']:.0%} |", flush=True)


if __name__ == "__main__":
    main()
