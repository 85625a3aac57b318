"""`python3 -m kiln ARGS`, and the `kiln` command pip installs, run the kiln command line
(`kiln info|run|bench|explain|profile|tidy|...`)."""
import sys

from kiln import _kiln


def main():
    sys.stdout.flush()
    return _kiln.cli(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
