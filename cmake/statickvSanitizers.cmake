# Sanitizer builds of this project's own test code.
#
#   cmake -DSTATICKV_SANITIZE=address,undefined ...   (any -fsanitize= list)
#
# statickv_sanitize(target) compiles and links `target` with the sanitizers.
# Only our targets get them: LibTorch comes prebuilt (the PyPI wheel), so
# ASan sees our code (the headers are compiled into each test) and the heap
# LibTorch allocates through malloc, which the ASan runtime intercepts.
# -fno-sanitize-recover makes every UBSan finding fatal, so ctest fails on
# it instead of printing a line and passing.
set(STATICKV_SANITIZE "" CACHE STRING
    "Build the tests with -fsanitize=<list> (e.g. address,undefined); empty = off")

function(statickv_sanitize target)
  if(NOT STATICKV_SANITIZE)
    return()
  endif()
  set(flags -fsanitize=${STATICKV_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_compile_options(${target} PRIVATE ${flags})
  target_link_options(${target} PRIVATE ${flags})
endfunction()
