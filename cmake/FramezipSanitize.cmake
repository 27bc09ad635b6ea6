# FRAMEZIP_SANITIZE=address,undefined instruments every target (the asan and fuzz presets set it).
# With FRAMEZIP_FUZZ every target also gets libFuzzer's coverage instrumentation, so the fuzzers
# see edges in the libraries they drive, not only in their own file.
set(_fz_flags)
if(FRAMEZIP_SANITIZE)
  list(APPEND _fz_flags -fsanitize=${FRAMEZIP_SANITIZE} -fno-omit-frame-pointer
                        -fno-sanitize-recover=all)
endif()
if(FRAMEZIP_FUZZ)
  list(APPEND _fz_flags -fsanitize=fuzzer-no-link)
endif()
foreach(_flag IN LISTS _fz_flags)
  # One generator expression per flag: a list inside $<...> would be split apart by CMake.
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:${_flag}>)
endforeach()
if(FRAMEZIP_SANITIZE)
  add_link_options(-fsanitize=${FRAMEZIP_SANITIZE})
endif()
