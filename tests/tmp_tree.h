/* Test helpers (header-only, any test folder): scratch directories under /tmp. */
#ifndef GS_TESTS_TMP_TREE_H
#define GS_TESTS_TMP_TREE_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/** "@a a/@a b" into @a buf (@a len bytes). Returns 1, or 0 (buf empty) when it does not fit. */
static inline int tmp_path_join(char *buf, size_t len, const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    buf[0] = '\0';
    if (la + 1 + lb + 1 > len) return 0;
    memcpy(buf, a, la);
    buf[la] = '/';
    memcpy(buf + la + 1, b, lb + 1);
    return 1;
}

/** Delete @a path and everything below it (best effort; a missing path is fine). */
static inline void tmp_tree_remove(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *de;
    char sub[512];
    if (d == NULL) return;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        if (!tmp_path_join(sub, sizeof(sub), path, de->d_name)) continue;
        tmp_tree_remove(sub);
        (void)unlink(sub);
    }
    closedir(d);
    (void)rmdir(path);
}

/** Entries of directory @a path whose names contain @a part ("" for all; 0 when @a path is
 *  missing). */
static inline int tmp_tree_count(const char *path, const char *part)
{
    DIR *d = opendir(path);
    struct dirent *de;
    int n = 0;
    if (d == NULL) return 0;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
            strstr(de->d_name, part) != NULL)
            n++;
    closedir(d);
    return n;
}

#endif
