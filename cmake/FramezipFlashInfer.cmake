# FlashInfer's attention kernels (header-only C++/CUDA templates) for the CUDA backend:
# FRAMEZIP_FLASHINFER=AUTO|ON|OFF. With AUTO they are used whenever the CUDA backend is built and
# scripts/fetch-flashinfer.sh can get the pinned wheel's headers (third_party/flashinfer); ON
# insists; OFF never looks, and the project's own kernels serve every case.
#
# The headers go into FRAMEZIP_DEPS_CACHE (default ~/.cache/framezip), outside the build tree, so
# a fresh clone or a new build folder does not download them again. Defines the INTERFACE target
# framezip::flashinfer_headers and FRAMEZIP_WITH_FLASHINFER.
set(FRAMEZIP_FLASHINFER AUTO CACHE STRING "Use FlashInfer's attention kernels: AUTO, ON or OFF")
set_property(CACHE FRAMEZIP_FLASHINFER PROPERTY STRINGS AUTO ON OFF)
if(NOT FRAMEZIP_FLASHINFER MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "FRAMEZIP_FLASHINFER must be AUTO, ON or OFF, not '${FRAMEZIP_FLASHINFER}'")
endif()
set(FRAMEZIP_WITH_FLASHINFER OFF)
set(FRAMEZIP_FLASHINFER_NOTE "off (FRAMEZIP_FLASHINFER=OFF)")

if(NOT FRAMEZIP_WITH_CUDA)
  set(FRAMEZIP_FLASHINFER_NOTE "off (no CUDA backend)")
  if(FRAMEZIP_FLASHINFER STREQUAL "ON")
    message(FATAL_ERROR "FRAMEZIP_FLASHINFER=ON needs the CUDA backend (FRAMEZIP_CUDA)")
  endif()
elseif(NOT FRAMEZIP_FLASHINFER STREQUAL "OFF")
  if(DEFINED ENV{XDG_CACHE_HOME} AND NOT "$ENV{XDG_CACHE_HOME}" STREQUAL "")
    set(default_cache "$ENV{XDG_CACHE_HOME}/framezip")
  else()
    set(default_cache "$ENV{HOME}/.cache/framezip")
  endif()
  set(FRAMEZIP_DEPS_CACHE "${default_cache}" CACHE PATH
      "Where downloaded build dependencies (FlashInfer's headers) are kept")
  file(STRINGS ${CMAKE_SOURCE_DIR}/third_party/flashinfer/requirements.txt pin
       REGEX "^flashinfer-python==")
  string(REGEX REPLACE "^flashinfer-python==([^ ]+).*" "\\1" version "${pin}")
  set(dir "${FRAMEZIP_DEPS_CACHE}/flashinfer-${version}")
  execute_process(
    COMMAND ${CMAKE_SOURCE_DIR}/scripts/fetch-flashinfer.sh ${dir}
    RESULT_VARIABLE fetch_result
    ERROR_VARIABLE fetch_error)
  if(fetch_result EQUAL 0)
    set(FRAMEZIP_WITH_FLASHINFER ON)
    set(FRAMEZIP_FLASHINFER_NOTE "${version} (${dir})")
    add_library(framezip_flashinfer_headers INTERFACE)
    add_library(framezip::flashinfer_headers ALIAS framezip_flashinfer_headers)
    # Ahead of the toolkit's own CCCL: FlashInfer is written against the CUB, Thrust and
    # libcu++ it ships. SYSTEM: its warnings are not ours.
    target_include_directories(framezip_flashinfer_headers SYSTEM BEFORE INTERFACE
      ${dir}/include
      ${dir}/cccl/cub
      ${dir}/cccl/libcudacxx/include
      ${dir}/cccl/thrust
      ${dir}/cutlass/include
      ${dir}/cutlass/tools/util/include)
  elseif(FRAMEZIP_FLASHINFER STREQUAL "ON")
    message(FATAL_ERROR "FRAMEZIP_FLASHINFER=ON but its headers could not be fetched: "
                        "${fetch_error}")
  else()
    string(STRIP "${fetch_error}" fetch_error)
    set(FRAMEZIP_FLASHINFER_NOTE "off (${fetch_error})")
    message(WARNING "framezip: FlashInfer is off, the project's own attention kernels serve "
                    "every case: ${fetch_error}")
  endif()
endif()
