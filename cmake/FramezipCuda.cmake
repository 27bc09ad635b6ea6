# FRAMEZIP_CUDA=AUTO|ON|OFF. With AUTO the CUDA backend is compiled whenever nvcc is found
# (on PATH or at /usr/local/cuda); ON insists on it; OFF never looks.
include(CheckLanguage)
set(FRAMEZIP_WITH_CUDA OFF)
if(NOT FRAMEZIP_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "FRAMEZIP_CUDA must be AUTO, ON or OFF, not '${FRAMEZIP_CUDA}'")
endif()
if(NOT FRAMEZIP_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # sm_80 (A100), sm_90 (H100/H200) as machine code, plus compute_90 PTX for newer chips.
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know that nvcc 13 takes C++20; kernels need no more than C++17.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(FRAMEZIP_WITH_CUDA ON)
  elseif(FRAMEZIP_CUDA STREQUAL "ON")
    message(FATAL_ERROR "FRAMEZIP_CUDA=ON but no CUDA compiler was found "
                        "(put nvcc on PATH or install the CUDA toolkit at /usr/local/cuda)")
  endif()
endif()
