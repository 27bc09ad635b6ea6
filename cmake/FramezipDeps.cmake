# Every dependency comes from Debian 12's packages (scripts/install-deps.sh installs them); nothing
# is fetched at build time.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf CONFIG QUIET)
if(NOT Protobuf_FOUND)
  find_package(Protobuf REQUIRED)
endif()
find_package(gRPC CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
# Boost.Beast (header-only, libboost-dev): the OpenAI-compatible HTTP API (server/openai_http.cc).
find_package(Boost 1.74 REQUIRED)
include(FindFramezipOpenCV)
pkg_check_modules(FFMPEG REQUIRED IMPORTED_TARGET libavformat libavcodec libavutil libswscale)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
# The media workers' syscall filter (media/worker/sandbox.cc).
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET libseccomp)
pkg_check_modules(ONIG REQUIRED IMPORTED_TARGET oniguruma)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
find_package(OpenSSL REQUIRED)  # SHA-256 for content hashes and block keys
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas REQUIRED)
