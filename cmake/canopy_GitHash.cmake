# Run at build time (not configure time): writes OUT with the source tree's commit, touching it only
# when the commit changes, so a binary carried to another machine still names the commit it was built at.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE hash OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(hash AND dirty)
  set(hash "${hash}-dirty")
endif()
set(content "/// \\file canopy_GitHash.hpp\n/// \\brief Commit of the sources at build time (generated).\n#pragma once\n#define CANOPY_GIT_BUILT \"${hash}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${content}")
  file(WRITE ${OUT} "${content}")
endif()
