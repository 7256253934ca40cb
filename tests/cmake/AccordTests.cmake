# The registration functions shared by more than one folder of tests/ (and by
# examples/, whose training example is a test too): a program run under
# mpiexec with 1-4 ranks, one CTest test per rank count. Each folder keeps the
# functions only it uses beside its tests (accord_add_mpi_test in mpi/,
# accord_add_pytest in python/, accord_add_launcher_test in launcher/,
# accord_add_bed_test in multihost/, accord_add_gpu_test in gpu/).
#
# They rely on accord_session_dir() and accord_test_processors() from the top
# CMakeLists.txt, and register tests in the directory that calls them: a
# test's default working directory is that folder's build directory.

# accord_add_mpiexec_tests(NAME <prefix> NP <rank counts...> TIMEOUT <s> LABEL <label>
#                          COMMAND <program and args...> [ENV VAR=VALUE ...]
#                          [MPIEXEC_ARGS <flags...>] [WORKING_DIRECTORY <dir>])
#
# Registers `<NAME>_np<N>` for each N in NP: mpiexec with N ranks running
# COMMAND, with the ENV assignments set for mpiexec and forwarded to every
# rank (-x), extra mpiexec flags, its own Open MPI session directory, and
# PROCESSORS for ctest -j. The base of every other mpiexec-run function.
function(accord_add_mpiexec_tests)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT;LABEL;WORKING_DIRECTORY" "NP;ENV;MPIEXEC_ARGS;COMMAND" ${ARGN})
  set(forward_env)
  foreach(assignment IN LISTS ARG_ENV)
    string(REGEX REPLACE "=.*" "" var "${assignment}")
    list(APPEND forward_env -x ${var})
  endforeach()
  if(NOT ARG_WORKING_DIRECTORY)
    set(ARG_WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  foreach(np IN LISTS ARG_NP)
    set(test_name ${ARG_NAME}_np${np})
    add_test(NAME ${test_name}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${ACCORD_MPIEXEC_FLAGS} ${ARG_MPIEXEC_ARGS}
              ${forward_env} ${MPIEXEC_PREFLAGS} ${ARG_COMMAND} ${MPIEXEC_POSTFLAGS}
      WORKING_DIRECTORY ${ARG_WORKING_DIRECTORY})
    accord_test_processors(${np} processors)
    accord_session_dir(${test_name} session_base)
    set_tests_properties(${test_name} PROPERTIES
      TIMEOUT ${ARG_TIMEOUT}
      PROCESSORS ${processors}
      LABELS "${ARG_LABEL}"
      ENVIRONMENT "OMPI_MCA_orte_tmpdir_base=${session_base};${ARG_ENV}")
  endforeach()
endfunction()

# accord_add_mpi_runs(NAME <test name prefix> TARGET <executable target>
#                     NP <rank counts...> [TIMEOUT <s>] [ENV VAR=VALUE ...]
#                     [MPIEXEC_ARGS <flags...>] [ARGS <program arguments...>])
#
# Registers `<NAME>_np<N>` for each N in NP: mpiexec with N ranks running
# TARGET with ARGS (e.g. a Catch test spec), with the given environment (set
# for mpiexec and forwarded to every rank with -x) and extra mpiexec flags,
# labelled `mpi`, failing after TIMEOUT seconds (default 240).
function(accord_add_mpi_runs)
  cmake_parse_arguments(ARG "" "NAME;TARGET;TIMEOUT" "NP;ENV;MPIEXEC_ARGS;ARGS" ${ARGN})
  if(NOT ARG_NAME OR NOT ARG_TARGET OR NOT ARG_NP)
    message(FATAL_ERROR "accord_add_mpi_runs: NAME, TARGET and NP are required")
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 240)
  endif()
  accord_add_mpiexec_tests(NAME ${ARG_NAME} NP ${ARG_NP} TIMEOUT ${ARG_TIMEOUT} LABEL mpi
    ENV ${ARG_ENV} MPIEXEC_ARGS ${ARG_MPIEXEC_ARGS} COMMAND $<TARGET_FILE:${ARG_TARGET}> ${ARG_ARGS})
endfunction()
