# framezip_add_test(NAME name SRCS a.cc b.cc DEPS lib... [LABELS extra...])
# Builds one Catch2 v2 test binary and registers each TEST_CASE with CTest; the test case's tags
# ([unit][engine], [cuda], ...) become CTest labels, so `ctest -L unit` or `ctest -LE cuda` select.
find_package(Catch2 REQUIRED)
include(ParseAndAddCatchTests)
set(PARSE_CATCH_TESTS_ADD_TO_CONFIGURE_DEPENDS ON)
set(PARSE_CATCH_TESTS_ADD_TARGET_IN_TEST_NAME ON)

function(framezip_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SRCS})
  target_link_libraries(${T_NAME} PRIVATE framezip_testing Catch2::Catch2WithMain ${T_DEPS}
                                          framezip_warnings)
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  ParseAndAddCatchTests(${T_NAME})
  get_property(_tests TARGET ${T_NAME} PROPERTY ParseAndAddCatchTests_TESTS)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  foreach(_t IN LISTS _tests)
    set_property(TEST ${_t} APPEND PROPERTY LABELS ${T_LABELS})
    set_property(TEST ${_t} PROPERTY TIMEOUT ${T_TIMEOUT})
    set_property(TEST ${_t} APPEND PROPERTY ENVIRONMENT
                 "FRAMEZIP_SOURCE_DIR=${CMAKE_SOURCE_DIR}"
                 "FRAMEZIP_BINARY_DIR=${CMAKE_BINARY_DIR}")
  endforeach()
endfunction()
