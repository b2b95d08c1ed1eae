/* Region annotations for CSP (docs/measurement.md, "Regions").
 *
 * Link the program with libcsp-regions (-lcsp-regions): its functions do nothing and cost a
 * call. Under csp-run, the preloaded libcsp-measure.so defines the same symbols and interposes
 * them, so the same binary records a per-thread region tree (count, inclusive and exclusive
 * time) and, with --region-log, a timestamped enter/exit log.
 *
 * Regions nest per thread. A region's key is its path of (static id, dynamic id) pairs; the
 * dynamic id distinguishes instances of one static region (an iteration, a message tag, ...).
 * An end without a matching begin is counted, never fatal. */
#ifndef CSP_MEASURE_REGIONS_H
#define CSP_MEASURE_REGIONS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Enters a region named by `name`. The name is copied on first use; passing the same string
 * literal repeatedly is the fast path. A null name is treated as "(null)". */
void csp_region_begin(const char* name, uint64_t dynamic_id);

/* Enters a region named by a number. Unless csp_region_register() gave it a name, the region is
 * called "region-<static_id>" in the profile. */
void csp_region_begin_id(uint32_t static_id, uint64_t dynamic_id);

/* Like csp_region_begin / csp_region_begin_id, and attaches a numeric attribute to this visit
 * (a data-centric property of what the region works on: a vertex degree, an input size, ...).
 * It is stored with the enter event of the region log (--region-log) and filtered on by
 * csp-query (docs/query.md, "Attributes"). */
void csp_region_begin_attr(const char* name, uint64_t dynamic_id, int64_t attr);
void csp_region_begin_id_attr(uint32_t static_id, uint64_t dynamic_id, int64_t attr);

/* Names a numeric region id for the whole process. Call it before the first begin of that id. */
void csp_region_register(uint32_t static_id, const char* name);

/* Leaves the innermost open region of the calling thread. */
void csp_region_end(void);

/* 1 when regions are recorded (the program runs under csp-run), else 0. */
int csp_region_active(void);

#ifdef __cplusplus
}
#endif

#endif /* CSP_MEASURE_REGIONS_H */
