# FRAMEZIP_SANITIZE=address,undefined instruments every target (the test-asan preset sets it).
if(FRAMEZIP_SANITIZE)
  set(_fz_san -fsanitize=${FRAMEZIP_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:${_fz_san}>)
  add_link_options(${_fz_san})
endif()
