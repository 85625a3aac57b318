#!/usr/bin/python3
"""A gRPC client for `kiln serve --grpc-port N`: the Open Inference Protocol's stubs are generated from
kiln's serve/proto/grpc_predict_v2.proto by protoc and grpc_python_plugin (Debian's
protobuf-compiler-grpc) into a directory of your choice, then used with Debian's python3-grpcio:

    examples/grpc_client.py --server 127.0.0.1:8001 --model MODEL [--stubs DIR] [--typed]

It checks the server is live and ready, prints the model's metadata, sends one request of zeros
shaped as the model's inputs (batch 1 for a variable dim) as raw bytes (or typed contents with
--typed), and prints each output's datatype, shape and first values. Any client generated from the
protocol's grpc_predict_v2.proto (KServe's, Triton's grpc_service.proto) talks to kiln the same way."""
import argparse
import importlib
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np

PROTO_DIR = pathlib.Path(__file__).resolve().parents[1] / "serve" / "proto"
# The protocol's datatypes as numpy holds them (BF16 as its raw 16 bits: numpy has no bfloat16).
NUMPY = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
         "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
         "FP32": np.float32, "FP64": np.float64, "BF16": np.uint16}
# The typed field of each datatype's elements (FP16 and BF16 travel only as raw bytes).
TYPED_FIELD = {"BOOL": "bool_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
               "UINT32": "uint_contents", "UINT64": "uint64_contents", "INT8": "int_contents",
               "INT16": "int_contents", "INT32": "int_contents", "INT64": "int64_contents",
               "FP32": "fp32_contents", "FP64": "fp64_contents"}


def generate_stubs(directory):
    """Writes grpc_predict_v2_pb2.py and grpc_predict_v2_pb2_grpc.py into `directory` and imports
    them; returns (messages, service stubs)."""
    plugin = shutil.which("grpc_python_plugin")
    if plugin is None or shutil.which("protoc") is None:
        sys.exit("protoc and grpc_python_plugin are needed: apt-get install protobuf-compiler-grpc")
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["protoc", f"--proto_path={PROTO_DIR}", f"--python_out={directory}", f"--grpc_out={directory}",
                    f"--plugin=protoc-gen-grpc={plugin}", "grpc_predict_v2.proto"], check=True)
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))  # the service module imports the messages by name
    return importlib.import_module("grpc_predict_v2_pb2"), importlib.import_module("grpc_predict_v2_pb2_grpc")


def request_for(pb, model, inputs, typed=False):
    """A ModelInferRequest carrying `inputs` ({name: (datatype, numpy array)}): raw bytes, or typed
    contents (where the datatype has a typed field)."""
    request = pb.ModelInferRequest(model_name=model)
    for name, (datatype, array) in inputs.items():
        tensor = request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        if typed:
            getattr(tensor.contents, TYPED_FIELD[datatype]).extend(array.reshape(-1).tolist())
        else:
            request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    return request


def response_arrays(response):
    """{name: (datatype, numpy array)} from a ModelInferResponse, raw or typed."""
    arrays = {}
    for index, output in enumerate(response.outputs):
        dtype = NUMPY[output.datatype]
        if response.raw_output_contents:
            array = np.frombuffer(response.raw_output_contents[index], dtype=dtype)
        else:
            array = np.array(getattr(output.contents, TYPED_FIELD[output.datatype]), dtype=dtype)
        arrays[output.name] = (output.datatype, array.reshape(tuple(output.shape)))
    return arrays


def main():
    import grpc

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="127.0.0.1:8001", help="HOST:PORT of kiln serve's gRPC listener")
    parser.add_argument("--model", required=True)
    parser.add_argument("--stubs", help="where to generate the stubs (default: a temporary directory)")
    parser.add_argument("--typed", action="store_true", help="send typed contents instead of raw bytes")
    parser.add_argument("--timeout", type=float, default=30, help="seconds each call may take")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as temporary:
        pb, service = generate_stubs(args.stubs or temporary)
        with grpc.insecure_channel(args.server) as channel:
            stub = service.GRPCInferenceServiceStub(channel)
            live = stub.ServerLive(pb.ServerLiveRequest(), timeout=args.timeout).live
            ready = stub.ServerReady(pb.ServerReadyRequest(), timeout=args.timeout).ready
            print(f"server live: {live}, ready: {ready}")
            metadata = stub.ModelMetadata(pb.ModelMetadataRequest(name=args.model), timeout=args.timeout)
            print(f"model {metadata.name} versions {list(metadata.versions)} platform {metadata.platform}")
            inputs = {}
            for tensor in metadata.inputs:
                shape = [1 if dim < 0 else dim for dim in tensor.shape]
                print(f"  input {tensor.name} {tensor.datatype} {list(tensor.shape)}")
                inputs[tensor.name] = (tensor.datatype, np.zeros(shape, NUMPY[tensor.datatype]))
            response = stub.ModelInfer(request_for(pb, args.model, inputs, args.typed), timeout=args.timeout)
            for name, (datatype, array) in response_arrays(response).items():
                print(f"  output {name} {datatype} {list(array.shape)}: {array.reshape(-1)[:4].tolist()}")


if __name__ == "__main__":
    main()
