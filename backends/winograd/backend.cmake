# The Winograd backend: kiln's own transforms around the native backend's sgemm micro-kernels, so
# it needs no library and links the native backend.
option(KILN_WITH_WINOGRAD "Build the Winograd convolution backend" ON)
if(KILN_WITH_WINOGRAD)
  kiln_add_backend(winograd kiln_native)
else()
  kiln_backend_not_built(winograd)
endif()
