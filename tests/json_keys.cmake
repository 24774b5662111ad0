# require_json_keys(<json text> <where> [PATH <member/index>...] KEYS <key>...): every key exists
# in the object at PATH of the JSON text, else a fatal error "<where>: no '<key>'". Shared by the
# ctest checks of the tools' --json outputs.
function(require_json_keys doc where)
  cmake_parse_arguments(A "" "" "PATH;KEYS" ${ARGN})
  foreach(key ${A_KEYS})
    string(JSON v ERROR_VARIABLE err GET "${doc}" ${A_PATH} ${key})
    if(err)
      message(FATAL_ERROR "${where}: no '${key}': ${err}")
    endif()
  endforeach()
endfunction()
