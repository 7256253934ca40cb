# Script (cmake -P) run on every build by the accord_python_stage target: makes
# STAGE an importable `accord` package that mirrors the sources.
#   -DPY_SRC=<bindings/python/accord> -DTORCH_SRC=<frameworks/torch/python>
#   -DSTAGE=<build>/python/accord -DLIBACCORD=<path> -DLIBACCORD_NAME=<soname>
foreach(var PY_SRC TORCH_SRC STAGE LIBACCORD LIBACCORD_NAME)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "stage_python.cmake: ${var} is not set")
  endif()
endforeach()

file(MAKE_DIRECTORY ${STAGE})

# Points `link` at `target` unless it already does.
function(accord_link target link)
  if(IS_SYMLINK ${link})
    file(READ_SYMLINK ${link} current)
    if(current STREQUAL target)
      return()
    endif()
    file(REMOVE ${link})
  elseif(EXISTS ${link})
    file(REMOVE_RECURSE ${link})
  endif()
  file(CREATE_LINK ${target} ${link} SYMBOLIC)
endfunction()

# Links to sources that no longer exist go.
file(GLOB staged LIST_DIRECTORIES true ${STAGE}/*)
foreach(path IN LISTS staged)
  if(IS_SYMLINK ${path} AND NOT EXISTS ${path})
    file(REMOVE ${path})
  endif()
endforeach()

# Every .py file and sub-package of the framework-neutral package.
file(GLOB sources LIST_DIRECTORIES true RELATIVE ${PY_SRC} ${PY_SRC}/*)
foreach(name IN LISTS sources)
  if(name MATCHES "^__pycache__$" OR name STREQUAL "torch")
    continue()
  endif()
  if(IS_DIRECTORY ${PY_SRC}/${name} OR name MATCHES "\\.py$")
    accord_link(${PY_SRC}/${name} ${STAGE}/${name})
  endif()
endforeach()

# accord.torch is the whole directory, so new files appear without a build.
accord_link(${TORCH_SRC} ${STAGE}/torch)

execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${LIBACCORD} ${STAGE}/${LIBACCORD_NAME}
                RESULT_VARIABLE copy_result)
if(NOT copy_result EQUAL 0)
  message(FATAL_ERROR "stage_python.cmake: cannot copy ${LIBACCORD} to ${STAGE}")
endif()
