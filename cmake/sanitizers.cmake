# TP_SANITIZE="address,undefined" or "thread" instruments every target.
if(TP_SANITIZE)
  add_compile_options(-fsanitize=${TP_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${TP_SANITIZE})
endif()
