# framezip_add_fuzzer(NAME fuzz_x SRCS x_fuzzer.cc DEPS lib...): a libFuzzer target, built only
# with the `fuzz` preset (clang, FRAMEZIP_FUZZ=ON, ASan+UBSan). Run it as
#   build-fuzz/bin/fuzz_x -max_total_time=600 tests/fuzz/corpus/x/
function(framezip_add_fuzzer)
  cmake_parse_arguments(F "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${F_NAME} ${F_SRCS})
  target_compile_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
  target_link_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${F_NAME} PRIVATE ${F_DEPS})
endfunction()
