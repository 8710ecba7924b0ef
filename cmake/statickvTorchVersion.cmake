# The LibTorch versions statickv is tested against, and the C++ standard each
# one needs (docs/getting-started.md, "LibTorch and transformers versions").
#
# scripts/test.sh runs the suite against any of them:
#   STATICKV_TORCH=2.15.0 bash scripts/test.sh
set(STATICKV_TORCH_TESTED_MIN 2.11)
set(STATICKV_TORCH_TESTED_MAX 2.15)
# From 2.14, LibTorch's public headers stop with "#error C++20 or later
# compatible compiler is required to use ATen." below C++20.
set(STATICKV_TORCH_CXX20_FROM 2.14)

option(STATICKV_ALLOW_UNTESTED_TORCH
       "Configure against a LibTorch outside the tested range (it may not build or may fail tests)"
       OFF)

# After find_package(Torch): stops outside the tested range (unless
# STATICKV_ALLOW_UNTESTED_TORCH), and sets STATICKV_TORCH_VERSION
# (major.minor) and STATICKV_CXX_STANDARD (17 or 20) for the targets.
function(statickv_check_torch_version)
  set(problem "")
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" minor "${Torch_VERSION}")
  set(range "${STATICKV_TORCH_TESTED_MIN} to ${STATICKV_TORCH_TESTED_MAX}")
  if(NOT minor)
    set(problem "found a LibTorch that reports no version (Torch_VERSION='${Torch_VERSION}')")
  elseif(minor VERSION_LESS STATICKV_TORCH_TESTED_MIN OR
         minor VERSION_GREATER STATICKV_TORCH_TESTED_MAX)
    set(problem "found LibTorch ${Torch_VERSION}")
  endif()
  if(problem)
    set(message "statickv is tested with LibTorch ${range}, but ${problem} (Torch_DIR=${Torch_DIR}). "
                "Point CMAKE_PREFIX_PATH at a torch in that range (python -c 'import torch; "
                "print(torch.utils.cmake_prefix_path)' after pip install torch==2.15.0, say), "
                "or configure with -DSTATICKV_ALLOW_UNTESTED_TORCH=ON to try this one anyway.")
    if(NOT STATICKV_ALLOW_UNTESTED_TORCH)
      message(FATAL_ERROR "${message}")
    endif()
    message(WARNING "${message} Going on: STATICKV_ALLOW_UNTESTED_TORCH is ON.")
  endif()
  if(minor AND minor VERSION_LESS STATICKV_TORCH_CXX20_FROM)
    set(standard 17)
  else()
    set(standard 20)
  endif()
  set(STATICKV_TORCH_VERSION "${minor}" PARENT_SCOPE)
  set(STATICKV_CXX_STANDARD ${standard} PARENT_SCOPE)
endfunction()
