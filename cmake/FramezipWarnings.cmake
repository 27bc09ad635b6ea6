# framezip_warnings: an interface target that framezip's own targets link, so that third-party
# and generated code (protobuf) is never built with -Werror.
add_library(framezip_warnings INTERFACE)
target_compile_options(framezip_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${FRAMEZIP_WERROR}>>:-Werror>)
