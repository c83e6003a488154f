# One ctest entry per test file and kind, not per test case (tests/CMakeLists.txt, ppo_test_groups): run after each
# build of ppo_tests with
#   cmake -D EXE=<ppo_tests> -D SPEC=<Catch test spec> -D PREFIX=<name prefix> -D LABEL=<ctest label>
#         -D WEIGHT=<cost of a case> -D TIMEOUT=<s> -D DIR=<working folder> -D OUT=<file to write> -P test_groups.cmake
# Catch's --filenames-as-tags (-#) tags every case with its file's name ([#test_plan]); the cases that match SPEC,
# listed, name the files that have any. Each such file becomes the entry PREFIX + file, which runs those cases in one
# process: `ppo_tests -# "[#test_plan]SPEC" --warn NoTests` (an entry that matches no case fails instead of passing
# having run nothing). Its COST (ctest -j starts the costliest first) is WEIGHT times its number of cases; once ctest
# has timed a run, it goes by the times instead.
execute_process(COMMAND "${EXE}" "-#" --list-tests "${SPEC}" OUTPUT_VARIABLE listing RESULT_VARIABLE status
                WORKING_DIRECTORY "${DIR}")
# --list-tests exits with the number of cases it lists (modulo 256) and ends with "N matching test cases".
if(NOT status MATCHES "^[0-9]+$" OR NOT listing MATCHES "\n([0-9]+) matching test cases?\n")
  message(FATAL_ERROR "${EXE} -# --list-tests ${SPEC} failed (${status}):\n${listing}")
endif()
set(listed "${CMAKE_MATCH_1}")
# A case's tags follow its name, indented six spaces; the file's tag sorts first. Every listed case must be found, so
# that no case is left out of the entries unseen.
string(REGEX MATCHALL "\n      \\[#[A-Za-z0-9_]+\\]" tags "${listing}")
list(LENGTH tags found)
if(NOT found EQUAL listed)
  message(FATAL_ERROR "${EXE} -# --list-tests ${SPEC}: ${listed} cases listed, the file tags of ${found} read")
endif()
set(files "")
foreach(tag IN LISTS tags)
  string(REGEX REPLACE ".*\\[#([A-Za-z0-9_]+)\\]" "\\1" file "${tag}")
  list(APPEND files "${file}")
  if(NOT DEFINED "cases_${file}")
    set("cases_${file}" 0)
  endif()
  math(EXPR "cases_${file}" "${cases_${file}} + 1")
endforeach()
list(REMOVE_DUPLICATES files)
set(script "")
foreach(file IN LISTS files)
  math(EXPR cost "${cases_${file}} * ${WEIGHT}")
  set(name "[==[${PREFIX}${file}]==]")
  string(APPEND script "add_test(${name} [==[${EXE}]==] [==[-#]==] [==[[#${file}]${SPEC}]==] --warn NoTests)\n"
         "set_tests_properties(${name} PROPERTIES LABELS [==[${LABEL}]==] TIMEOUT ${TIMEOUT} COST ${cost} "
         "WORKING_DIRECTORY [==[${DIR}]==])\n")
endforeach()
file(WRITE "${OUT}" "${script}")
