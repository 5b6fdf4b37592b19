/* gs_client_address_file_read: the address files gs-slurm-cluster writes, and bad ones. */
#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static void make_dir(void)
{
    strcpy(dir, "/tmp/gs-addrfile.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* Write @a text to DIR/@a name; returns the path (static buffer per call site is enough). */
static const char *put(const char *name, const char *text, char *path, size_t cap)
{
    FILE *f;
    snprintf(path, cap, "%s/%s", dir, name);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fputs(text, f) >= 0, 1);
    cr_assert_eq(fclose(f), 0);
    return path;
}

TestSuite(client_addrfile, .init = make_dir, .fini = remove_dir);

Test(client_addrfile, reads_address_and_absolute_token_file)
{
    char tpath[128], apath[128], text[256];
    gs_client_address_t a;
    put("token", "abc123\n", tpath, sizeof(tpath));
    snprintf(text, sizeof(text), "# written by gs-slurm-cluster\nGSCHED_ADDRESS=tcp://10.1.2.3:8786\n"
             "GSCHED_TOKEN_FILE=%s\nOTHER=ignored\n\n", tpath);
    put("address", text, apath, sizeof(apath));
    cr_assert_eq(gs_client_address_file_read(apath, &a), GS_OK, "%s", gs_last_error());
    cr_assert_str_eq(a.address, "tcp://10.1.2.3:8786");
    cr_assert_str_eq(a.token, "abc123");
}

Test(client_addrfile, token_file_relative_to_the_address_file_and_env_default)
{
    char tpath[128], apath[128];
    gs_client_address_t a;
    put("tok", "t0k\n", tpath, sizeof(tpath));
    put("address", "GSCHED_ADDRESS=tcp://h:1\r\nGSCHED_TOKEN_FILE=tok\n", apath, sizeof(apath));
    cr_assert_eq(setenv("GSCHED_ADDRESS_FILE", apath, 1), 0);
    cr_assert_eq(gs_client_address_file_read(NULL, &a), GS_OK, "%s", gs_last_error());
    cr_assert_str_eq(a.address, "tcp://h:1");
    cr_assert_str_eq(a.token, "t0k");
}

Test(client_addrfile, token_is_optional)
{
    char apath[128];
    gs_client_address_t a;
    put("address", "GSCHED_ADDRESS=tcp://h:2", apath, sizeof(apath));
    cr_assert_eq(gs_client_address_file_read(apath, &a), GS_OK, "%s", gs_last_error());
    cr_assert_str_eq(a.address, "tcp://h:2");
    cr_assert_str_eq(a.token, "");
}

Test(client_addrfile, rejects_bad_files_and_leaves_the_output_alone)
{
    static const struct { const char *text, *error; gs_status_t st; } bad[] = {
        {"GSCHED_TOKEN_FILE=/x\n", "no GSCHED_ADDRESS", GS_ERR_INVALID_PARAM},
        {"GSCHED_ADDRESS tcp://h:1\n", "line 1 is not KEY=VALUE", GS_ERR_INVALID_PARAM},
        {"\nGSCHED_ADDRESS=h:1\n", "line 2: GSCHED_ADDRESS is not", GS_ERR_INVALID_PARAM},
        {"GSCHED_ADDRESS=tcp://h:1\nGSCHED_TOKEN_FILE=/nonexistent/token\n", "cannot open the token file",
         GS_ERR_IO},
        {"GSCHED_ADDRESS=tcp://h:1\nGSCHED_TOKEN_FILE=empty\n", "is empty", GS_ERR_INVALID_PARAM},
    };
    char apath[128], epath[128];
    gs_client_address_t a;
    put("empty", "\n", epath, sizeof(epath));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&a, 0x5a, sizeof(a));
        put("address", bad[i].text, apath, sizeof(apath));
        cr_assert_eq(gs_client_address_file_read(apath, &a), bad[i].st, "case %zu", i);
        cr_assert_not_null(strstr(gs_last_error(), bad[i].error), "case %zu: %s", i, gs_last_error());
        cr_assert_eq((unsigned char)a.address[0], 0x5a, "case %zu wrote the output", i);
    }
}

Test(client_addrfile, rejects_long_address_and_long_line)
{
    char apath[128], *text = malloc(9000);
    gs_client_address_t a;
    cr_assert_not_null(text);
    strcpy(text, "GSCHED_ADDRESS=tcp://");
    memset(text + strlen(text), 'h', 300);
    strcpy(text + 21 + 300, ":1\n");
    put("address", text, apath, sizeof(apath));
    cr_assert_eq(gs_client_address_file_read(apath, &a), GS_ERR_INVALID_PARAM);
    cr_assert_not_null(strstr(gs_last_error(), "shorter than 256"), "%s", gs_last_error());
    memset(text, 'x', 8999);
    text[8999] = '\0';
    put("address", text, apath, sizeof(apath));
    cr_assert_eq(gs_client_address_file_read(apath, &a), GS_ERR_INVALID_PARAM);
    cr_assert_not_null(strstr(gs_last_error(), "line 1 is longer"), "%s", gs_last_error());
    free(text);
}

Test(client_addrfile, rejects_missing_arguments_and_files)
{
    gs_client_address_t a;
    char apath[128];
    cr_assert_eq(gs_client_address_file_read("/x", NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(unsetenv("GSCHED_ADDRESS_FILE"), 0);
    cr_assert_eq(gs_client_address_file_read(NULL, &a), GS_ERR_INVALID_PARAM);
    cr_assert_not_null(strstr(gs_last_error(), "GSCHED_ADDRESS_FILE is not set"));
    snprintf(apath, sizeof(apath), "%s/none", dir);
    cr_assert_eq(gs_client_address_file_read(apath, &a), GS_ERR_IO);
    cr_assert_not_null(strstr(gs_last_error(), "cannot open the address file"));
}
