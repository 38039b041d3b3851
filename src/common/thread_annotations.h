// Clang's thread-safety annotations (-Wthread-safety): which mutex guards which member, which
// functions need it held. No-ops for other compilers. See common/mutex.h for annotated mutexes.
#pragma once

#if defined(__clang__)
#define FENCEFS_TSA(x) __attribute__((x))
#else
#define FENCEFS_TSA(x)
#endif

#define CAPABILITY(x) FENCEFS_TSA(capability(x))
#define SCOPED_CAPABILITY FENCEFS_TSA(scoped_lockable)
#define GUARDED_BY(x) FENCEFS_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) FENCEFS_TSA(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) FENCEFS_TSA(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) FENCEFS_TSA(acquired_after(__VA_ARGS__))
#define REQUIRES(...) FENCEFS_TSA(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) FENCEFS_TSA(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) FENCEFS_TSA(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) FENCEFS_TSA(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) FENCEFS_TSA(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) FENCEFS_TSA(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) FENCEFS_TSA(release_generic_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) FENCEFS_TSA(try_acquire_capability(__VA_ARGS__))
#define TRY_ACQUIRE_SHARED(...) FENCEFS_TSA(try_acquire_shared_capability(__VA_ARGS__))
#define EXCLUDES(...) FENCEFS_TSA(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS FENCEFS_TSA(no_thread_safety_analysis)
