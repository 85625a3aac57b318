# The oneDNN backend (Debian's libdnnl-dev).
option(KILN_WITH_ONEDNN "Build the oneDNN backend (off: no libdnnl needed, its nodes run on other backends)" ON)
if(KILN_WITH_ONEDNN)
  find_package(dnnl REQUIRED)
  # kiln_native: oneDNN leaves to native the convolutions native's rule says it runs faster.
  kiln_add_backend(onednn DNNL::dnnl kiln_native)
else()
  kiln_backend_not_built(onednn)
endif()
