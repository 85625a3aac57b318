"""`python3 -m kiln ARGS` runs the kiln command line (`kiln info|run|bench|explain|conformance`)."""
import sys

from kiln import _kiln

if __name__ == "__main__":
    sys.stdout.flush()
    sys.exit(_kiln.cli(sys.argv[1:]))
