# The CTest test cmake_consumer (registered in tests/torch_cpp/CMakeLists.txt):
#   1. cmake --install the accord build into WORK_DIR/prefix;
#   2. configure and build tests/cmake_consumer against that prefix only;
#   3. run both programs under mpiexec with 2 ranks.
# Any failing step fails the test with its output.
#
# Variables: ACCORD_BUILD_DIR, CONSUMER_SOURCE_DIR, WORK_DIR, BUILD_TYPE,
# MPIEXEC, MPIEXEC_FLAGS (a list).
foreach(var ACCORD_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR MPIEXEC)
  if(NOT ${var})
    message(FATAL_ERROR "run_consumer.cmake: ${var} is not set")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE RelWithDebInfo)
endif()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "cmake_consumer: ${what} failed (${result}):\n${output}")
  endif()
  message(STATUS "cmake_consumer: ${what}: OK")
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${prefix} ${build})

run_step("install into ${prefix}" ${CMAKE_COMMAND} --install ${ACCORD_BUILD_DIR} --prefix ${prefix})
# Only the fresh prefix: the consumer must not pick up accord from anywhere else.
run_step("configure" ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${build} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
run_step("build" ${CMAKE_COMMAND} --build ${build} -j2)
foreach(program consumer_core consumer_torch)
  run_step("mpiexec -np 2 ${program}" ${MPIEXEC} -np 2 ${MPIEXEC_FLAGS} ${build}/${program})
endforeach()
