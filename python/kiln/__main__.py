"""`python3 -m kiln ARGS`, and the `kiln` command pip installs, run the kiln command line
(`kiln info|run|bench|explain|profile|tidy|quantize|...`)."""
import sys

from kiln import _kiln


def main():
    # The quantizer is Python (it writes ONNX files with the onnx package); the rest is kiln's C++ CLI.
    if sys.argv[1:2] == ["quantize"]:
        from kiln import quantization
        return quantization.main(sys.argv[2:])
    sys.stdout.flush()
    return _kiln.cli(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
