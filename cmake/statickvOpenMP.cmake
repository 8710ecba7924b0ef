# statickv_openmp(target): compile target's sources with OpenMP, as
# LibTorch's CPU backend is (Note [CPU kernels' threads], docs/design.md).
# ATen's at::parallel_for is a header template: in a translation unit
# compiled without OpenMP it runs the whole loop on the calling thread, so
# statickv's CPU kernels (rms_norm, rotary + write, the activation, the
# stream projections, the pick) would use one core however many threads
# LibTorch has. The link is private: a consumer of the installed package
# links the OpenMP runtime (libgomp, the one LibTorch loads) and compiles
# its own sources as it likes.

# LibTorch's parallel backend, from ATen/Config.h: OpenMP, or its native
# thread pool (whose at::parallel_for needs nothing from the compiler).
set(statickv_torch_openmp OFF)
foreach(dir IN LISTS TORCH_INCLUDE_DIRS)
  if(EXISTS "${dir}/ATen/Config.h")
    file(STRINGS "${dir}/ATen/Config.h" statickv_parallel_line REGEX "define AT_PARALLEL_OPENMP 1")
    if(statickv_parallel_line)
      set(statickv_torch_openmp ON)
    endif()
    break()
  endif()
endforeach()

# LibTorch's OpenMP runtime is GCC's libgomp, and only GCC's OpenMP code
# calls it: clang's calls libomp, a second runtime with its own thread pool
# that at::set_num_threads would not govern. So with another compiler the
# kernels stay on the calling thread (and the configure says so).
if(statickv_torch_openmp AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  find_package(OpenMP COMPONENTS CXX)
  if(NOT OpenMP_CXX_FOUND)
    message(WARNING "LibTorch's CPU backend is OpenMP but this compiler has none: statickv's "
                    "CPU kernels will run on one thread (install the compiler's OpenMP runtime)")
  endif()
endif()
if(statickv_torch_openmp AND OpenMP_CXX_FOUND)
  set(STATICKV_OPENMP ON)
else()
  set(STATICKV_OPENMP OFF)
endif()
message(STATUS "statickv CPU kernels: LibTorch OpenMP backend ${statickv_torch_openmp}, "
               "compiled with OpenMP ${STATICKV_OPENMP} (${CMAKE_CXX_COMPILER_ID})")

# The flags, and the runtime by name (gomp with GCC), not FindOpenMP's
# imported target: that names the compiler's libgomp.so by its full path,
# which CMake then reports as hidden behind LibTorch's own libgomp.so.1 in
# every executable's run path. By name, the linker finds the compiler's and
# the loader shares the one LibTorch brings (same soname).
function(statickv_openmp target)
  if(STATICKV_OPENMP)
    separate_arguments(flags NATIVE_COMMAND "${OpenMP_CXX_FLAGS}")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${flags}>)
    target_link_libraries(${target} PRIVATE ${OpenMP_CXX_LIB_NAMES})
  endif()
endfunction()
