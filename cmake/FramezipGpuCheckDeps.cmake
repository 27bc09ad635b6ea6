# The dependencies of the FRAMEZIP_GPU_CHECK_ONLY build (scripts/gpu-check.sh): only what
# framezip_common, the engine's core and ops and their [cuda] tests link. Nothing is fetched; each
# missing package stops the configure with its name, and gpu-check.sh checks for them first.
find_package(Threads REQUIRED)
find_package(absl CONFIG)
find_package(spdlog CONFIG)  # brings fmt
set(BLA_VENDOR OpenBLAS)
find_package(BLAS)
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas)
find_package(Catch2)
set(_missing "")
if(NOT absl_FOUND)
  list(APPEND _missing "abseil (absl::status)")
endif()
if(NOT spdlog_FOUND)
  list(APPEND _missing "spdlog + fmt")
endif()
if(NOT BLAS_FOUND OR NOT OPENBLAS_INCLUDE_DIR)
  list(APPEND _missing "OpenBLAS (cblas.h, the CPU reference's sgemm)")
endif()
if(NOT Catch2_FOUND)
  list(APPEND _missing "Catch2 v2")
endif()
if(_missing)
  list(JOIN _missing ", " _missing)
  message(FATAL_ERROR "FRAMEZIP_GPU_CHECK_ONLY: missing ${_missing}; scripts/gpu-check.sh "
                      "--prepare stages prebuilt tests for machines without them")
endif()
