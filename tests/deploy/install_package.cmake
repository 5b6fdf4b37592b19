# ctest: install the build tree to a scratch prefix, then configure, build and run
# tests/deploy/consumer against it with find_package(gsched), and compile it once more with
# `pkg-config gsched`. Variables: BUILD_DIR, SRC_DIR, WORK_DIR, GENERATOR, C_COMPILER, SAN_FLAGS.
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_out "${out}" PARENT_SCOPE)
endfunction()

run_step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
run_step("configuring the consumer" ${CMAKE_COMMAND} -S ${SRC_DIR}/consumer -B ${WORK_DIR}/build
  -G ${GENERATOR} -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
  "-DCMAKE_C_FLAGS=${SAN_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${SAN_FLAGS}")
run_step("building the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
set(ENV{LD_LIBRARY_PATH} "${prefix}/lib:${prefix}/lib64:$ENV{LD_LIBRARY_PATH}")
run_step("running the consumer" ${WORK_DIR}/build/consumer)
if(NOT step_out MATCHES "gsched consumer ok")
  message(FATAL_ERROR "the consumer printed: ${step_out}")
endif()

# pkg-config: the client library alone
# (skipped under a pkg-config sysroot, e.g. .devdeps on a GPU host: the sysroot is prefixed to
# every .pc path, so a prefix installed outside it cannot be found that way)
find_program(PKG_CONFIG_EXE pkg-config)
if(PKG_CONFIG_EXE AND NOT "$ENV{PKG_CONFIG_SYSROOT_DIR}" STREQUAL "")
  message(STATUS "pkg-config check skipped: PKG_CONFIG_SYSROOT_DIR is set")
elseif(PKG_CONFIG_EXE)
  file(GLOB pcdir ${prefix}/lib*/pkgconfig)
  set(ENV{PKG_CONFIG_PATH} "${pcdir}:$ENV{PKG_CONFIG_PATH}")
  run_step("pkg-config gsched" ${PKG_CONFIG_EXE} --cflags --libs gsched)
  string(STRIP "${step_out}" pcflags)
  separate_arguments(pcflags UNIX_COMMAND "${pcflags}")
  separate_arguments(sanflags UNIX_COMMAND "${SAN_FLAGS}")
  run_step("compiling with pkg-config" ${C_COMPILER} ${sanflags} ${SRC_DIR}/consumer/main.c
    ${pcflags} -o ${WORK_DIR}/consumer-pc)
  run_step("running the pkg-config consumer" ${WORK_DIR}/consumer-pc)
endif()
message(STATUS "installed package usable: ${prefix}")
