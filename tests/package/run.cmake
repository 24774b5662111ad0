# ctest driver: install the build tree into a scratch prefix, then configure, build and run the
# consumer project against it with find_package(replayssm).
set(work ${BUILD}/package-test)
file(REMOVE_RECURSE ${work})
foreach(step
    "${CMAKE_COMMAND};--install;${BUILD};--prefix;${work}/prefix"
    "${CMAKE_COMMAND};-S;${SRC};-B;${work}/build;-DCMAKE_PREFIX_PATH=${work}/prefix;-DCMAKE_BUILD_TYPE=Release"
    "${CMAKE_COMMAND};--build;${work}/build"
    "${work}/build/consumer")
  execute_process(COMMAND ${step} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package test step failed (${rc}): ${step}\n${out}\n${err}")
  endif()
endforeach()
message(STATUS "${out}")
