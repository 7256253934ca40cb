# Runs a multi-rank program that must end the job on its own (MPI_Abort) and
# passes only if it does: mpiexec exits non-zero within TIMEOUT seconds (and,
# if MAX_SECONDS is set, within that many whole seconds), and its output
# matches every regular expression in EXPECT and none in REJECT. Anything
# else fails with the whole output.
#
# Variables: MPIEXEC, MPIEXEC_FLAGS (a list), NP, PROGRAM, ARGS (a list),
# TIMEOUT, MAX_SECONDS, EXPECT and REJECT (lists of regular expressions).
foreach(var MPIEXEC NP PROGRAM TIMEOUT)
  if(NOT ${var})
    message(FATAL_ERROR "expect_abort.cmake: ${var} is not set")
  endif()
endforeach()

string(TIMESTAMP start "%s")
execute_process(COMMAND ${MPIEXEC} -np ${NP} ${MPIEXEC_FLAGS} ${PROGRAM} ${ARGS}
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output TIMEOUT ${TIMEOUT})
string(TIMESTAMP end "%s")
math(EXPR seconds "${end} - ${start}")

set(problems)
if(result MATCHES "timeout|Process terminated due to timeout")
  list(APPEND problems "the job did not end within ${TIMEOUT} s (a hang)")
elseif(result EQUAL 0)
  list(APPEND problems "mpiexec exited 0: the job was expected to end with MPI_Abort")
elseif(MAX_SECONDS AND seconds GREATER MAX_SECONDS)
  list(APPEND problems "the job took ${seconds} s to end, more than ${MAX_SECONDS} s")
endif()
foreach(pattern IN LISTS EXPECT)
  if(NOT output MATCHES "${pattern}")
    list(APPEND problems "the output does not match \"${pattern}\"")
  endif()
endforeach()
foreach(pattern IN LISTS REJECT)
  if(output MATCHES "${pattern}")
    list(APPEND problems "the output matches \"${pattern}\"")
  endif()
endforeach()
if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "expect_abort: ${PROGRAM} on ${NP} ranks (exit ${result}, ${seconds} s):\n  ${text}\n"
                      "--- output ---\n${output}")
endif()
message(STATUS "expect_abort: ${PROGRAM} on ${NP} ranks ended the job as expected (exit ${result}, ${seconds} s)")
