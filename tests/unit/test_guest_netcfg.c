/* The default guest's moat.net= parameter (guest/init/netcfg.h, compiled
 * in here: it is guest code, not part of libmoat). */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "guest/init/netcfg.c"

#define IP(a, b, c, d) ((uint32_t)(a) << 24 | (uint32_t)(b) << 16 | (uint32_t)(c) << 8 | (uint32_t)(d))

static int ip4(const char *s, uint32_t *out)
{
    return netcfg_ipv4(s, strlen(s), out);
}

static int parse(const char *s, struct netcfg *c)
{
    return netcfg_parse(s, strlen(s), c);
}

START_TEST(ipv4_good)
{
    uint32_t a = 1;
    ck_assert_int_eq(ip4("0.0.0.0", &a), 0);
    ck_assert_uint_eq(a, 0);
    ck_assert_int_eq(ip4("10.0.2.15", &a), 0);
    ck_assert_uint_eq(a, IP(10, 0, 2, 15));
    ck_assert_int_eq(ip4("255.255.255.255", &a), 0);
    ck_assert_uint_eq(a, 0xffffffffu);
    ck_assert_int_eq(ip4("192.168.100.200", &a), 0);
    ck_assert_uint_eq(a, IP(192, 168, 100, 200));
    /* Only LEN bytes are read: the rest of the string does not matter. */
    ck_assert_int_eq(netcfg_ipv4("1.2.3.4/24", 7, &a), 0);
    ck_assert_uint_eq(a, IP(1, 2, 3, 4));
}
END_TEST

START_TEST(ipv4_bad)
{
    static const char *bad[] = {
        "", ".", "1", "1.2", "1.2.3", "1.2.3.", ".1.2.3", "1..2.3", "1.2.3.4.",
        "1.2.3.4.5", "256.1.1.1", "1.2.3.256", "1.2.3.999", "1.2.3.1000",
        "01.2.3.4", "1.2.3.04", "1.2.3.00", "+1.2.3.4", "-1.2.3.4", "1.2.3.4 ",
        " 1.2.3.4", "1.2.3.4x", "0x1.2.3.4", "1.2.3.a", "1,2,3,4", "4294967295",
        "1.2.3.4/24",
    };
    uint32_t a = 77;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(ip4(bad[i], &a) == -EINVAL, "accepted '%s'", bad[i]);
        ck_assert_uint_eq(a, 77);
    }
    /* A NUL inside the given length is not a digit. */
    ck_assert_int_eq(netcfg_ipv4("1.2.3.4\0", 8, &a), -EINVAL);
}
END_TEST

START_TEST(modes)
{
    struct netcfg c;
    ck_assert_int_eq(parse("dhcp", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_DHCP);
    ck_assert_int_eq(parse("off", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_OFF);
    static const char *bad[] = {
        "", "DHCP", "dhcp ", "dhcpx", "of", "offf", "on", "static", "static:",
        "static", "none", "auto",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(parse(bad[i], &c) == -EINVAL, "accepted '%s'", bad[i]);
}
END_TEST

START_TEST(static_good)
{
    struct netcfg c;
    ck_assert_int_eq(parse("static:10.0.2.15/24", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_STATIC);
    ck_assert_uint_eq(c.addr, IP(10, 0, 2, 15));
    ck_assert_uint_eq(c.prefix, 24);
    ck_assert_uint_eq(c.gw, 0);
    ck_assert_uint_eq(c.dns, 0);

    ck_assert_int_eq(parse("static:10.0.2.15/24,10.0.2.2", &c), 0);
    ck_assert_uint_eq(c.gw, IP(10, 0, 2, 2));
    ck_assert_uint_eq(c.dns, 0);

    ck_assert_int_eq(parse("static:10.0.2.15/24,10.0.2.2,10.0.2.3", &c), 0);
    ck_assert_uint_eq(c.gw, IP(10, 0, 2, 2));
    ck_assert_uint_eq(c.dns, IP(10, 0, 2, 3));

    /* Empty gateway, a name server: DNS outside the subnet is fine. */
    ck_assert_int_eq(parse("static:10.0.2.15/24,,8.8.8.8", &c), 0);
    ck_assert_uint_eq(c.gw, 0);
    ck_assert_uint_eq(c.dns, IP(8, 8, 8, 8));

    ck_assert_int_eq(parse("static:192.168.1.1/32", &c), 0);
    ck_assert_uint_eq(c.prefix, 32);
    ck_assert_int_eq(parse("static:10.1.2.3/8,10.255.255.254", &c), 0);
    ck_assert_uint_eq(c.prefix, 8);
    ck_assert_int_eq(parse("static:11.0.0.1/1", &c), 0);
    /* /31 (RFC 3021): both addresses are hosts. */
    ck_assert_int_eq(parse("static:10.0.0.0/31,10.0.0.1", &c), 0);
    ck_assert_int_eq(parse("static:10.0.0.1/31,10.0.0.0", &c), 0);
}
END_TEST

START_TEST(static_bad)
{
    static const char *bad[] = {
        "static:10.0.2.15",                 /* no prefix */
        "static:10.0.2.15/",                /* empty prefix */
        "static:10.0.2.15/0",
        "static:10.0.2.15/33",
        "static:10.0.2.15/024",
        "static:10.0.2.15/08",
        "static:10.0.2.15/2x",
        "static:10.0.2.15/-1",
        "static:10.0.2.15/100",
        "static:/24",
        "static:10.0.2/24",
        "static:0.0.0.0/24",
        "static:255.255.255.255/32",
        "static:10.0.2.0/24",               /* network address */
        "static:10.0.2.255/24",             /* broadcast address */
        "static:10.0.2.15/24,",             /* trailing comma, nothing after */
        "static:10.0.2.15/24,10.0.3.1",     /* gateway off the subnet */
        "static:10.0.2.15/24,10.0.2.15",    /* gateway is the address */
        "static:10.0.2.15/32,10.0.2.2",     /* no gateway can be on a /32 */
        "static:10.0.2.15/24,10.0.2.2,",    /* empty DNS */
        "static:10.0.2.15/24,10.0.2.2,0.0.0.0",
        "static:10.0.2.15/24,10.0.2.2,1.2.3",
        "static:10.0.2.15/24,10.0.2.2,1.2.3.4,5.6.7.8",
        "static:10.0.2.15/24,x",
        "static:10.0.2.15/24 ,10.0.2.2",
        "static:10.0.2.15/24,,",
        "static: 10.0.2.15/24",
        "static:10.0.2.15/24/24",
    };
    struct netcfg c;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(parse(bad[i], &c) == -EINVAL, "accepted '%s'", bad[i]);
}
END_TEST

START_TEST(cmdline)
{
    struct netcfg c;
    ck_assert_int_eq(netcfg_from_cmdline("", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_DEFAULT);
    ck_assert_int_eq(netcfg_from_cmdline("console=ttyS0 reboot=k panic=-1\n", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_DEFAULT);
    ck_assert_int_eq(netcfg_from_cmdline("console=ttyS0 moat.net=off panic=-1\n", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_OFF);
    ck_assert_int_eq(netcfg_from_cmdline("moat.net=dhcp", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_DHCP);
    ck_assert_int_eq(netcfg_from_cmdline("a\tmoat.net=static:10.0.2.15/24,10.0.2.2\n", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_STATIC);
    ck_assert_uint_eq(c.addr, IP(10, 0, 2, 15));
    ck_assert_uint_eq(c.gw, IP(10, 0, 2, 2));
    /* The last one decides, a good one after a bad one included. */
    ck_assert_int_eq(netcfg_from_cmdline("moat.net=dhcp moat.net=off", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_OFF);
    ck_assert_int_eq(netcfg_from_cmdline("moat.net=bogus moat.net=dhcp", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_DHCP);
    ck_assert_int_eq(netcfg_from_cmdline("moat.net=dhcp moat.net=bogus", &c), -EINVAL);
    ck_assert_int_eq(c.mode, NETCFG_DEFAULT);
    ck_assert_int_eq(netcfg_from_cmdline("moat.net=", &c), -EINVAL);
    /* Quotes are dropped, as the kernel does. */
    ck_assert_int_eq(netcfg_from_cmdline("moat.net=\"off\"", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_OFF);
    ck_assert_int_eq(netcfg_from_cmdline("\"moat.net=dhcp\" x", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_DHCP);
    /* A quoted space keeps the word together: "off x" is not a mode. */
    ck_assert_int_eq(netcfg_from_cmdline("moat.net=\"off x\"", &c), -EINVAL);
    /* Only whole words: a prefix or a suffix is another parameter. */
    ck_assert_int_eq(netcfg_from_cmdline("xmoat.net=off moat.netx=off amoat.net=dhcp", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_DEFAULT);
    ck_assert_int_eq(netcfg_from_cmdline("moat.net", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_DEFAULT);
    /* After "--" the words are the command's. */
    ck_assert_int_eq(netcfg_from_cmdline("moat.net=off -- /bin/echo moat.net=dhcp", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_OFF);
    ck_assert_int_eq(netcfg_from_cmdline("x -- moat.net=bogus", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_DEFAULT);
    ck_assert_int_eq(netcfg_from_cmdline("x --x moat.net=off", &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_OFF);
}
END_TEST

START_TEST(cmdline_long_word)
{
    /* A value longer than any valid one is malformed, not cut short into
     * something that parses. */
    char line[1024];
    struct netcfg c;
    strcpy(line, "moat.net=static:10.0.2.15/24,10.0.2.2,10.0.2.3");
    size_t n = strlen(line);
    memset(line + n, '0', sizeof(line) - n - 1);
    line[sizeof(line) - 1] = 0;
    ck_assert_int_eq(netcfg_from_cmdline(line, &c), -EINVAL);
    /* 255 bytes of word: fits, still malformed; then a good one after. */
    char w[300];
    memset(w, 'a', sizeof(w));
    memcpy(w, "moat.net=", 9);
    strcpy(w + 255, " moat.net=off");
    ck_assert_int_eq(netcfg_from_cmdline(w, &c), 0);
    ck_assert_int_eq(c.mode, NETCFG_OFF);
}
END_TEST

START_TEST(fmt)
{
    char b[16];
    netcfg_fmt_ipv4(IP(10, 0, 2, 15), b);
    ck_assert_str_eq(b, "10.0.2.15");
    netcfg_fmt_ipv4(0xffffffffu, b);
    ck_assert_str_eq(b, "255.255.255.255");
    netcfg_fmt_ipv4(0, b);
    ck_assert_str_eq(b, "0.0.0.0");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("guest_netcfg");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, ipv4_good);
    tcase_add_test(tc, ipv4_bad);
    tcase_add_test(tc, modes);
    tcase_add_test(tc, static_good);
    tcase_add_test(tc, static_bad);
    tcase_add_test(tc, cmdline);
    tcase_add_test(tc, cmdline_long_word);
    tcase_add_test(tc, fmt);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
