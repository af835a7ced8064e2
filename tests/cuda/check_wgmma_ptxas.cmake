# The warpgroup-MMA kernels as ptxas builds them for sm_90a (a check that needs the CUDA toolkit,
# not a GPU). These kernels leave MMAs in flight across their own instructions, and ptxas keeps
# that correct where it cannot prove the accumulators untouched by injecting a warpgroup.arrive
# (message C7519) or warpgroup.wait (C7517) of its own, or by serializing the MMAs (C7510): the
# results stay right and the overlap the kernel was written for is gone, silently. So do spills,
# which the kernels' register budgets are sized to avoid. This fails on either.
#   cmake -DNVCC=<nvcc> -DSRC=<source root> -DOUT=<scratch dir> -P check_wgmma_ptxas.cmake
foreach(v NVCC SRC OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check_wgmma_ptxas.cmake needs -D${v}=")
  endif()
endforeach()
file(MAKE_DIRECTORY ${OUT})
set(failures "")
foreach(unit attention_wg moe)
  execute_process(
    COMMAND ${NVCC} -std=c++17 -arch=sm_90a -O3 -Xptxas -v -DLLMRT_CUDA_SM90A=1 -I${SRC}
            -c ${SRC}/kernels/${unit}.cu -o ${OUT}/${unit}.o
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nvcc failed on kernels/${unit}.cu:\n${err}")
  endif()
  string(REPLACE "\n" ";" lines "${out}${err}")
  set(function "")
  set(wg_functions 0)
  foreach(line IN LISTS lines)
    if(line MATCHES "\\((C7510|C7517|C7519)\\)")
      string(APPEND failures "kernels/${unit}.cu: ${line}\n")
    elseif(line MATCHES "Function properties for ([A-Za-z0-9_]+)")
      set(function "${CMAKE_MATCH_1}")
      if(function MATCHES "2wg")
        math(EXPR wg_functions "${wg_functions} + 1")
      endif()
    elseif(line MATCHES "([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads")
      if(NOT CMAKE_MATCH_1 EQUAL 0 OR NOT CMAKE_MATCH_2 EQUAL 0)
        string(APPEND failures "kernels/${unit}.cu: ${function}: ${line}\n")
      endif()
    endif()
  endforeach()
  if(wg_functions EQUAL 0)
    string(APPEND failures "kernels/${unit}.cu: no warpgroup kernel in ptxas's report (was it built for sm_90a?)\n")
  endif()
  message(STATUS "kernels/${unit}.cu: ${wg_functions} warpgroup kernels checked")
endforeach()
if(NOT failures STREQUAL "")
  message(FATAL_ERROR "ptxas's report on the warpgroup-MMA kernels:\n${failures}")
endif()
