# ctest driver for CLI runs: runs ${CLI} with ${ARGS} (comma-separated; %2C is a comma inside an
# argument) and requires exit code ${RC}. A failure path (RC != 0): exactly one line on stderr
# matching ${PATTERN} (a crash fails: its code is not ${RC}) and nothing on stdout (bad input is
# caught before any work or output). A success (RC 0): stdout matching ${PATTERN} (ctest's
# PASS_REGULAR_EXPRESSION alone would ignore the exit code).
string(REPLACE "," ";" ARGS "${ARGS}")
list(TRANSFORM ARGS REPLACE "%2C" ",")
execute_process(COMMAND ${CLI} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT "${rc}" STREQUAL "${RC}")
  message(FATAL_ERROR "exit status ${rc}, expected ${RC}\nstdout: ${out}\nstderr: ${err}")
endif()
if("${RC}" STREQUAL "0")
  if(NOT out MATCHES "${PATTERN}")
    message(FATAL_ERROR "stdout must match '${PATTERN}', got:\n${out}")
  endif()
  return()
endif()
string(STRIP "${err}" err)
string(REGEX MATCHALL "\n" newlines "${err}")
list(LENGTH newlines n)
if(NOT n EQUAL 0 OR NOT err MATCHES "${PATTERN}")
  message(FATAL_ERROR "stderr must be one line matching '${PATTERN}', got:\n${err}")
endif()
if(NOT "${out}" STREQUAL "")
  message(FATAL_ERROR "stdout must be empty on bad input, got:\n${out}")
endif()
