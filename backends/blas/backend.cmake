# The BLAS backend. OpenBLAS's OpenMP build shares the OpenMP runtime with oneDNN (the pthread
# build, which Debian's libopenblas.so alternative points at, would start a second pool), so it is
# linked by full path.
option(KILN_WITH_BLAS "Build the BLAS backend (off: no OpenBLAS needed)" ON)
if(KILN_WITH_BLAS)
  set(KILN_OPENBLAS_DIR /usr/lib/x86_64-linux-gnu/openblas-openmp CACHE PATH "OpenBLAS (OpenMP build) library folder")
  set(KILN_OPENBLAS_INCLUDE /usr/include/x86_64-linux-gnu/openblas-openmp CACHE PATH "its cblas.h folder")
  find_library(KILN_OPENBLAS_LIBRARY openblas PATHS ${KILN_OPENBLAS_DIR} NO_DEFAULT_PATH REQUIRED)
  kiln_add_backend(blas ${KILN_OPENBLAS_LIBRARY})
  target_include_directories(kiln_blas PRIVATE ${KILN_OPENBLAS_INCLUDE})
else()
  kiln_backend_not_built(blas)
endif()
