# ctest driver for a CLI run that must succeed: runs ${CLI} with ${ARGS} (comma-separated; %2C is
# a comma inside an argument) and requires exit code 0 and stdout matching ${PATTERN} (ctest's
# PASS_REGULAR_EXPRESSION alone ignores the exit code).
string(REPLACE "," ";" ARGS "${ARGS}")
list(TRANSFORM ARGS REPLACE "%2C" ",")
execute_process(COMMAND ${CLI} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT "${rc}" STREQUAL "0")
  message(FATAL_ERROR "exit status ${rc}, expected 0\nstdout: ${out}\nstderr: ${err}")
endif()
if(NOT out MATCHES "${PATTERN}")
  message(FATAL_ERROR "stdout must match '${PATTERN}', got:\n${out}")
endif()
