# framezip_warnings: an interface target that framezip's own targets link, so that third-party
# and generated code (protobuf) is never built with -Werror.
add_library(framezip_warnings INTERFACE)
target_compile_options(framezip_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${FRAMEZIP_WERROR}>>:-Werror>)
# Sanitizer instrumentation at -O1 defeats GCC's flow analysis: it reports libstdc++'s own
# std::regex internals as maybe-uninitialized (seen under address,undefined). The normal builds
# keep the warning as an error; the sanitizers check the same at run time.
if(FRAMEZIP_SANITIZE)
  target_compile_options(framezip_warnings INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Wno-error=maybe-uninitialized>)
endif()
# GCC warns that ThreadSanitizer does not model std::atomic_thread_fence, which Boost.Asio's
# handler queue uses (-Wtsan); the warning is about Asio's code, which we cannot change.
if(FRAMEZIP_SANITIZE MATCHES "thread")
  target_compile_options(framezip_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-tsan>)
endif()
