# ctest's format_check: fails when any C++ or CUDA file differs from what
# clang-format makes of it with the repository's .clang-format.
#   cmake -DCLANG_FORMAT=<exe> -DSOURCE_DIR=<repo> -P CheckFormat.cmake
file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}
     ${SOURCE_DIR}/include/*.hpp ${SOURCE_DIR}/src/*.cpp ${SOURCE_DIR}/src/*.hpp
     ${SOURCE_DIR}/src/*.cu ${SOURCE_DIR}/src/*.cuh ${SOURCE_DIR}/tests/*.cpp
     ${SOURCE_DIR}/tests/*.hpp ${SOURCE_DIR}/benchmarks/*.cpp ${SOURCE_DIR}/benchmarks/*.hpp
     ${SOURCE_DIR}/examples/*.cpp ${SOURCE_DIR}/reference/*.cpp ${SOURCE_DIR}/reference/*.hpp
     ${SOURCE_DIR}/reference/*.cu ${SOURCE_DIR}/reference/*.cuh
     ${SOURCE_DIR}/apps/*.cpp ${SOURCE_DIR}/apps/*.hpp ${SOURCE_DIR}/python/*.cpp
     ${SOURCE_DIR}/python/*.hpp ${SOURCE_DIR}/aoti/*.cpp ${SOURCE_DIR}/aoti/*.hpp)
set(bad "")
foreach(f IN LISTS files)
  execute_process(COMMAND ${CLANG_FORMAT} --style=file --dry-run --Werror ${f}
                  WORKING_DIRECTORY ${SOURCE_DIR} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    list(APPEND bad ${f})
  endif()
endforeach()
list(LENGTH files n)
if(bad)
  string(REPLACE ";" "\n  " bad_lines "${bad}")
  message(FATAL_ERROR "not clang-formatted (run scripts/format.sh):\n  ${bad_lines}")
endif()
message(STATUS "${n} files clang-formatted")
