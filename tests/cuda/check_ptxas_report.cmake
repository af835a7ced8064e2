# ptxas's report on the kernels whose register and pipeline budgets matter most, as ptxas builds
# them for sm_90a (a check that needs the CUDA toolkit, not a GPU):
#   - the warpgroup-MMA kernels leave MMAs in flight across their own instructions, and ptxas
#     keeps that correct where it cannot prove the accumulators untouched by injecting a
#     warpgroup.arrive (message C7519) or warpgroup.wait (C7517) of its own, or by serializing
#     the MMAs (C7510): the results stay right and the overlap the kernel was written for is gone,
#     silently;
#   - a spill in any kernel of moe.cu and attention_wg.cu, and in the DSA indexer's score kernels
#     of attention.cu (whose other kernels the build's -warn-spills does not cover).
# This fails on either.
#   cmake -DNVCC=<nvcc> -DSRC=<source root> -DOUT=<scratch dir> -P check_ptxas_report.cmake
foreach(v NVCC SRC OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check_ptxas_report.cmake needs -D${v}=")
  endif()
endforeach()
file(MAKE_DIRECTORY ${OUT})
set(failures "")
# Compiles kernels/<unit>.cu; fails on an injected wait or serialization anywhere in it, and on a
# spill in a function whose mangled name matches spill_re; at least one function must match
# want_re (the unit was built for sm_90a).
function(check_unit unit spill_re want_re)
  execute_process(
    COMMAND ${NVCC} -std=c++17 -arch=sm_90a -O3 -Xptxas -v -DLLMRT_CUDA_SM90A=1 -I${SRC}
            -c ${SRC}/kernels/${unit}.cu -o ${OUT}/${unit}.o
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nvcc failed on kernels/${unit}.cu:\n${err}")
  endif()
  string(REPLACE "\n" ";" lines "${out}${err}")
  set(function "")
  set(found 0)
  set(bad "${failures}")
  foreach(line IN LISTS lines)
    if(line MATCHES "\\((C7510|C7517|C7519)\\)")
      string(APPEND bad "kernels/${unit}.cu: ${line}\n")
    elseif(line MATCHES "Function properties for ([A-Za-z0-9_]+)")
      set(function "${CMAKE_MATCH_1}")
      if(function MATCHES "${want_re}")
        math(EXPR found "${found} + 1")
      endif()
    elseif(line MATCHES "([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads")
      if((NOT CMAKE_MATCH_1 EQUAL 0 OR NOT CMAKE_MATCH_2 EQUAL 0) AND function MATCHES "${spill_re}")
        string(APPEND bad "kernels/${unit}.cu: ${function}: ${line}\n")
      endif()
    endif()
  endforeach()
  if(found EQUAL 0)
    string(APPEND bad "kernels/${unit}.cu: no kernel matching ${want_re} in ptxas's report (built for sm_90a?)\n")
  endif()
  message(STATUS "kernels/${unit}.cu: ${found} kernels checked")
  set(failures "${bad}" PARENT_SCOPE)
endfunction()
check_unit(attention_wg "." "2wg")
check_unit(moe "." "2wg")
check_unit(attention "DsaScore(Tiled|Mma)Kernel" "DsaScore(Tiled|Mma)Kernel")
if(NOT failures STREQUAL "")
  message(FATAL_ERROR "ptxas's report:\n${failures}")
endif()
