# ctest's check of where the CUDA build finds cuDNN and NCCL (tessel_find_vendor_library): the CUDA
# toolkit first, then a Python environment's NVIDIA wheels (site-packages/nvidia/<name>/lib/lib<name>.so.N
# and include/), library and header only together. Each case lays out made-up folders and configures
# vendor_lookup/ against them.
#   cmake -DSOURCE_DIR=.. -DWORK_DIR=.. -DPYTHON=python3 -P vendor_lookup.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
set(failures 0)
# touch(<files relative to WORK_DIR>...)
function(touch)
  foreach(f IN LISTS ARGN)
    get_filename_component(dir "${WORK_DIR}/${f}" DIRECTORY)
    file(MAKE_DIRECTORY "${dir}")
    file(WRITE "${WORK_DIR}/${f}" "")
  endforeach()
endfunction()
# The lookup's Python without its site-packages (-S), so that wheels installed on this machine
# (PyTorch's) do not join the made-up ones; PYTHONPATH still applies.
file(WRITE "${WORK_DIR}/python-S" "#!/bin/sh\nexec \"${PYTHON}\" -S \"$@\"\n")
file(CHMOD "${WORK_DIR}/python-S" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
# expect(<case> <PYTHONPATH> <expected library|include, relative to WORK_DIR, or NOTFOUND> [-D...]):
# configures <case>/build (again, if it exists) with the -D arguments given.
function(expect case pythonpath expected)
  set(build "${WORK_DIR}/${case}/build")
  execute_process(COMMAND ${CMAKE_COMMAND} -E env "PYTHONPATH=${pythonpath}"
                          ${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/consumer/vendor_lookup" -B "${build}"
                          "-DTESSEL_SOURCE_DIR=${SOURCE_DIR}" "-DTOOLKIT=${WORK_DIR}/${case}/toolkit"
                          "-DTESSEL_PYTHON=${WORK_DIR}/python-S" ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  file(READ "${build}/found.txt" found)
  string(REPLACE "${WORK_DIR}/" "" found "${found}")
  string(REGEX REPLACE "[A-Z_]+-NOTFOUND" "NOTFOUND" found "${found}")
  if(NOT rc EQUAL 0 OR NOT found STREQUAL expected)
    message("FAILED ${case}: found '${found}', expected '${expected}' (configure exit ${rc}):\n${out}")
    math(EXPR failures "${failures} + 1")
    set(failures ${failures} PARENT_SCOPE)
  else()
    string(REGEX MATCH "tessel: nccl[^\n]*" said "${out}")
    message("ok ${case} ${ARGN}: ${said}")
  endif()
endfunction()

# 1. The toolkit's copy wins over a wheel's.
touch(toolkit-first/toolkit/lib64/libnccl.so toolkit-first/toolkit/include/nccl.h
      toolkit-first/site/nvidia/nccl/lib/libnccl.so.2 toolkit-first/site/nvidia/nccl/include/nccl.h)
expect(toolkit-first "${WORK_DIR}/toolkit-first/site"
       "toolkit-first/toolkit/lib64/libnccl.so|toolkit-first/toolkit/include")
# 2. No toolkit copy: the wheel's versioned library (it has no unversioned link) and its header.
touch(wheel/site/nvidia/nccl/lib/libnccl.so.2 wheel/site/nvidia/nccl/include/nccl.h)
expect(wheel "${WORK_DIR}/wheel/site" "wheel/site/nvidia/nccl/lib/libnccl.so.2|wheel/site/nvidia/nccl/include")
# 3. A header elsewhere (the toolkit's nccl.h, an older NCCL) does not pair with a wheel's library.
touch(header-elsewhere/toolkit/include/nccl.h
      header-elsewhere/site/nvidia/nccl/lib/libnccl.so.2 header-elsewhere/site/nvidia/nccl/include/nccl.h)
expect(header-elsewhere "${WORK_DIR}/header-elsewhere/site"
       "header-elsewhere/site/nvidia/nccl/lib/libnccl.so.2|header-elsewhere/site/nvidia/nccl/include")
# 4. nvidia is a namespace package: cuDNN's wheel in one folder, NCCL's in another on the path.
touch(namespace/a/nvidia/cudnn/lib/libcudnn.so.9 namespace/a/nvidia/cudnn/include/cudnn.h
      namespace/b/nvidia/nccl/lib/libnccl.so.2 namespace/b/nvidia/nccl/include/nccl.h)
expect(namespace "${WORK_DIR}/namespace/a:${WORK_DIR}/namespace/b"
       "namespace/b/nvidia/nccl/lib/libnccl.so.2|namespace/b/nvidia/nccl/include")
# 5. A wheel's library without its header is not taken (the build would not compile against it).
touch(no-header/site/nvidia/nccl/lib/libnccl.so.2)
expect(no-header "${WORK_DIR}/no-header/site" "NOTFOUND|NOTFOUND")
# 6. A library given anew on a re-configure takes the header beside it, not the one cached before.
touch(reconfigure/toolkit/lib64/libnccl.so reconfigure/toolkit/include/nccl.h
      reconfigure/wheel/nvidia/nccl/lib/libnccl.so.2 reconfigure/wheel/nvidia/nccl/include/nccl.h)
expect(reconfigure "" "reconfigure/toolkit/lib64/libnccl.so|reconfigure/toolkit/include")
expect(reconfigure "" "reconfigure/wheel/nvidia/nccl/lib/libnccl.so.2|reconfigure/wheel/nvidia/nccl/include"
       "-DTESSEL_NCCL_LIBRARY=${WORK_DIR}/reconfigure/wheel/nvidia/nccl/lib/libnccl.so.2")
# 7. =OFF leaves the library out, a wheel there or not.
touch(off/site/nvidia/nccl/lib/libnccl.so.2 off/site/nvidia/nccl/include/nccl.h)
expect(off "${WORK_DIR}/off/site" "OFF|" -DTESSEL_NCCL_LIBRARY=OFF)
# 8. Nowhere: not found, and the configure goes on.
file(MAKE_DIRECTORY "${WORK_DIR}/nowhere/site")
expect(nowhere "${WORK_DIR}/nowhere/site" "NOTFOUND|NOTFOUND")

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} vendor lookup case(s) failed")
endif()
