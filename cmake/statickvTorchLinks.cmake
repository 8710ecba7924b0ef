# PyPI's torch wheel loads its CUDA libraries (NCCL, cuDNN, ...) from the
# nvidia-* wheels beside it, through libtorch_cuda.so's own RPATH. At link
# time, though, GNU ld looks for those indirect libraries in the program's
# -rpath directories first, so a CUDA toolkit that ships an older NCCL
# (/usr/local/cuda/lib, on the program's path for libcudart) wins, and the
# link fails with undefined nccl* symbols (torch 2.15 against CUDA 13.0's
# NCCL). -rpath-link to the wheels' library folders makes the link resolve
# what the program will load at run time; it changes nothing at run time.
#
# Used by CMakeLists.txt and by the installed package config
# (statickvConfig.cmake), both after find_package(Torch).
function(statickv_torch_wheel_rpath_link)
  if(NOT TARGET torch OR NOT TORCH_INSTALL_PREFIX)
    return()
  endif()
  file(GLOB statickv_wheel_libs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
  foreach(dir IN LISTS statickv_wheel_libs)
    if(IS_DIRECTORY "${dir}")
      get_filename_component(dir "${dir}" REALPATH)
      set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_OPTIONS "LINKER:-rpath-link,${dir}")
    endif()
  endforeach()
endfunction()
