# Configures, builds and runs the consumer project in WORK_DIR.
#   MODE=find_package: installs STATICKV_BUILD_DIR into WORK_DIR/prefix first.
#   MODE=add_subdirectory: points the consumer at STATICKV_SOURCE_DIR.
#   MODE=wheel: the C++ package inside the Python package that PYTHON
#     imports (statickv.cmake_prefix_path) and that Python's torch, nothing
#     else; the consumer checks that it found statickv there.
#   EXPECTED_VERSION: the version the consumer must find (this build's).
#   CXX_STANDARD: the standard the consumer compiles at, exactly (17 or 20).
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix_path "${PREFIX_PATH}")
set(extra "")
if(MODE STREQUAL "find_package")
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${STATICKV_BUILD_DIR} --prefix ${WORK_DIR}/prefix
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install into ${WORK_DIR}/prefix failed")
  endif()
  list(PREPEND prefix_path ${WORK_DIR}/prefix)
elseif(MODE STREQUAL "wheel")
  execute_process(COMMAND ${PYTHON} -c
                          "import statickv, torch.utils; print(statickv.cmake_prefix_path + ';' + torch.utils.cmake_prefix_path, end='')"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE prefix_path ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${PYTHON} could not name statickv.cmake_prefix_path:\n${err}")
  endif()
  list(GET prefix_path 0 wheel_prefix)
  set(extra -DSTATICKV_EXPECTED_PREFIX=${wheel_prefix})
else()
  set(extra -DSTATICKV_SOURCE_DIR=${STATICKV_SOURCE_DIR})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
                        -DCMAKE_BUILD_TYPE=${BUILD_TYPE} "-DCMAKE_PREFIX_PATH=${prefix_path}"
                        -DSTATICKV_EXPECTED_VERSION=${EXPECTED_VERSION}
                        -DSTATICKV_CONSUMER_CXX_STANDARD=${CXX_STANDARD} ${extra}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer (${MODE}) failed:\n${out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer (${MODE}) failed:\n${out}")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer (${MODE}) exited with ${rc}")
endif()
