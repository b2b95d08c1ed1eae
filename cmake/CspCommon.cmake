# Compiler settings shared by every CSP target.

# csp_target_defaults(<target>): warnings on for our own code; sanitizers when requested.
function(csp_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter)
  if(CSP_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  # In a unity build each source file is included by a generated one, so gcc takes the classes a
  # .cpp defines for header classes and warns when their fields use the file's anonymous
  # namespace: true of every pimpl. Not a problem of a real header.
  if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
  endif()
endfunction()

# csp_release_O2(<target>...): -O2 instead of -O3 in Release builds, for libraries off the hot paths
# that the benchmarks measure (post-processing, measurement, the database's encoders): the views,
# the analyses, the web server and the synthetic generator answer a query or write a test input
# once. -O2 compiles them in about four fifths of -O3's time. csp-views took the same time either
# way (the four views of a 4,096-profile database: 0.18-0.21 s at -O2, 0.19-0.23 s at -O3),
# although an executable that links one of these and a library at -O3 may keep the -O2 copy of an
# inline function both define (the linker keeps the first).
function(csp_release_O2)
  foreach(target ${ARGN})
    target_compile_options(${target} PRIVATE $<$<CONFIG:Release>:-O2>)
  endforeach()
endfunction()

option(CSP_WERROR "Treat warnings in CSP's own code as errors" OFF)

if(CSP_SANITIZE OR CSP_FUZZ)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
# libFuzzer needs coverage of the code under test, not only of the fuzz target's own file: the
# libraries the fuzz targets exercise (csp_profile, csp_metrics) get the coverage hooks
# (csp_fuzz_coverage, called after they are defined). The other libraries and the tests of the same
# tree do without them: they cost about a sixth of the sanitizer build's compile time.
function(csp_fuzz_coverage)
  if(CSP_FUZZ)
    foreach(target ${ARGN})
      target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
    endforeach()
  endif()
endfunction()

# Generated Cap'n Proto code is not ours: no warnings flags on it, but it shares the library.
