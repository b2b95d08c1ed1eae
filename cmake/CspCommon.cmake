# Compiler settings shared by every CSP target.

# csp_target_defaults(<target>): warnings on for our own code; sanitizers when requested.
function(csp_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter)
  if(CSP_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

option(CSP_WERROR "Treat warnings in CSP's own code as errors" OFF)

if(CSP_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# Generated Cap'n Proto code is not ours: no warnings flags on it, but it shares the library.
