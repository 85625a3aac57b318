# The native reference backend: always built (every op's fallback and the oracle other kernels are
# tested against). It links neither oneDNN nor BLAS, so comparing a fast kernel with it never
# compares a library with itself.
kiln_add_backend(native)

# Plain-loop conv, gemm and pooling (backends/native/ref/): the oracle the tuned native kernels are
# tested against. Only the tests link it.
file(GLOB KILN_NATIVE_REFERENCE_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/backends/native/ref/*.cpp)
add_library(kiln_native_reference STATIC ${KILN_NATIVE_REFERENCE_SOURCES})
target_link_libraries(kiln_native_reference PUBLIC kiln_ops)

# The quantized kernels give the same bits on every ISA tier: GCC's default -ffp-contract=fast would
# fuse their float32 multiply-adds into FMAs in the AVX variants only (QLinearAdd's two dequantized
# terms), so one element's result would depend on whether it fell in a vector body or a tail.
set_source_files_properties(${CMAKE_SOURCE_DIR}/backends/native/quantize.cpp PROPERTIES COMPILE_OPTIONS
                                                                                      -ffp-contract=off)
