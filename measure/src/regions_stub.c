/* libcsp-regions: the region API as no-ops. Programs link against it so that they run
 * unchanged without measurement; libcsp-measure.so, preloaded by csp-run, interposes these
 * symbols with the recording versions. */
#include "csp/measure/regions.h"

void csp_region_begin(const char* name, uint64_t dynamic_id) {
  (void)name;
  (void)dynamic_id;
}
void csp_region_begin_attr(const char* name, uint64_t dynamic_id, int64_t attr) {
  (void)name;
  (void)dynamic_id;
  (void)attr;
}
void csp_region_begin_id(uint32_t static_id, uint64_t dynamic_id) {
  (void)static_id;
  (void)dynamic_id;
}
void csp_region_begin_id_attr(uint32_t static_id, uint64_t dynamic_id, int64_t attr) {
  (void)static_id;
  (void)dynamic_id;
  (void)attr;
}
void csp_region_register(uint32_t static_id, const char* name) {
  (void)static_id;
  (void)name;
}
void csp_region_end(void) {}
int csp_region_active(void) { return 0; }
