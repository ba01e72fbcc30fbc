# One warnings target that every project target links; third-party code (volk.c) does not.
add_library(gpt2vk_warnings INTERFACE)
if(MSVC)
  target_compile_options(gpt2vk_warnings INTERFACE /W4)
else()
  target_compile_options(gpt2vk_warnings INTERFACE
    -Wall -Wextra -Wpedantic -Wconversion -Wsign-conversion -Wshadow
    -Wno-missing-field-initializers  # Vulkan structs are set up as {sType} then fields
    -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Wdouble-promotion)
endif()
