/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tim_callback.h: Tencent IM's State.StateChange callback (POST
 * /callbacks/tim, docs/room.md Presence): its signature check and its body,
 * pure functions (fuzz/fuzz_tim_callback.c), used by handlers_tim_callback.c.
 *
 * Tencent's callback authentication: with a token set in the IM console, IM
 * appends RequestTime (unix seconds) and Sign to the callback URL, Sign the
 * lowercase hex SHA-256 of the token followed by RequestTime's decimal text.
 */
#ifndef ROOMD_HTTP_TIM_CALLBACK_H
#define ROOMD_HTTP_TIM_CALLBACK_H

#include <stddef.h>
#include <stdint.h>

enum tim_state_action { TIM_STATE_LOGIN, TIM_STATE_LOGOUT, TIM_STATE_DISCONNECT, TIM_STATE_OTHER };

/* 0 when sign (64 hex digits, any case) is sha256(token || request_time)
 * and request_time (1..18 decimal digits) lies within max_skew_s of now_s;
 * else -1 with why ("RequestTime: missing", "Sign: does not match", ...; no
 * secret in it). token NULL or "" never verifies. Constant time in sign.
 * Thread: any; pure. */
int tim_callback_verify(const char *token, const char *request_time, const char *sign,
                        int64_t now_s, int64_t max_skew_s, char *why, size_t whylen);

/* Parses a State.StateChange body {"CallbackCommand":"State.StateChange",
 * "Info":{"Action":"Login|Logout|Disconnect","To_Account":"<uid>",..},..}:
 * 0 with *action and *uid (To_Account must be a uid: a positive decimal
 * integer, as roomd names IM accounts); 1 when it is another command (to be
 * acknowledged and ignored); -1 with err naming the field. Thread: any; pure. */
int tim_callback_parse_state(const char *body, size_t len, enum tim_state_action *action,
                             int64_t *uid, char *err, size_t errlen);

#endif
