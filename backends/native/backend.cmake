# The native reference backend: always built (every op's fallback and the oracle other kernels are
# tested against). It links neither oneDNN nor BLAS, so comparing a fast kernel with it never
# compares a library with itself.
kiln_add_backend(native)
