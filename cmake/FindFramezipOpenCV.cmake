# Debian's split OpenCV packages (libopencv-{core,imgproc,imgcodecs}-dev) ship headers and
# libraries but not OpenCVConfig.cmake (that comes only with the full libopencv-dev), so find the
# three pieces directly and expose them as imported targets.
find_path(FRAMEZIP_OPENCV_INCLUDE_DIR opencv2/core.hpp PATH_SUFFIXES opencv4 REQUIRED)
foreach(_m core imgproc imgcodecs)
  find_library(FRAMEZIP_OPENCV_${_m}_LIBRARY opencv_${_m} REQUIRED)
  if(NOT TARGET opencv_${_m})
    add_library(opencv_${_m} UNKNOWN IMPORTED)
    set_target_properties(opencv_${_m} PROPERTIES
      IMPORTED_LOCATION ${FRAMEZIP_OPENCV_${_m}_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${FRAMEZIP_OPENCV_INCLUDE_DIR})
  endif()
endforeach()
