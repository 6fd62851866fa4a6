# The coordinator's Prometheus metrics (server/metrics.h). Included from server/CMakeLists.txt.
find_package(prometheus-cpp CONFIG REQUIRED)

pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

add_library(q38_metrics STATIC ${CMAKE_CURRENT_LIST_DIR}/metrics.cc ${CMAKE_CURRENT_LIST_DIR}/metrics_https.cc
            ${CMAKE_CURRENT_LIST_DIR}/host_port.cc)
target_include_directories(q38_metrics PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(q38_metrics
  PUBLIC absl::status absl::statusor absl::strings
  PRIVATE prometheus-cpp::core prometheus-cpp::pull PkgConfig::HTTPLIB OpenSSL::SSL)

q38_test(metrics_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/metrics_test.cc LIBS q38_metrics)
