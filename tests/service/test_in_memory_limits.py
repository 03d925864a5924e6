"""The service's in-memory limits (service/limits.py), each cap reached and given back: live streams
per team, page session, address and the instructor; a kept refusal's Retry-After, which counts
down the refusal's own wait rather than the minute it is kept."""
import asyncio

import pytest

from ece408_op.service.refused import Refused
from ece408_op.service.limits import STREAMS_PER_SESSION, STREAMS_PER_TEAM, Refusals, Streams
from ece408_op.service.tokens import Principal


def team(name):
    return Principal("team", name)


def opened(streams, n, principal, address, session=None):
    return [streams.open(principal, address, session) for _ in range(n)]


def refusal(streams, principal, address, session=None):
    with pytest.raises(Refused) as caught:
        streams.open(principal, address, session)
    assert caught.value.status == 429 and caught.value.retry_after
    return str(caught.value)


def test_a_team_holds_at_most_its_cap_and_gets_each_stream_back_when_it_ends():
    streams = Streams()
    held = opened(streams, STREAMS_PER_TEAM, team("red"), "10.0.0.1")
    assert "your team already has 16 live streams open" in refusal(streams, team("red"), "10.0.0.2")
    streams.open(team("blue"), "10.0.0.1")                   # another team, the same address: its own cap
    streams.close(held[0])
    streams.close(held[0])                                   # twice: counted once
    streams.open(team("red"), "10.0.0.3")
    assert "your team" in refusal(streams, team("red"), "10.0.0.3")


def test_a_page_session_holds_what_a_browser_opens_to_one_host():
    streams = Streams()
    opened(streams, STREAMS_PER_SESSION, team("red"), "10.0.0.1", session="s1")
    assert "this browser session" in refusal(streams, team("red"), "10.0.0.1", session="s1")
    streams.open(team("red"), "10.0.0.1", session="s2")


@pytest.mark.parametrize("cap", [3, 512])
def test_an_address_holds_its_cap_whatever_the_teams(cap):
    streams = Streams(per_address=cap)
    for i in range(cap):
        streams.open(team(f"t{i // STREAMS_PER_TEAM}"), "10.0.0.1")
    assert f"this address already has {cap} live streams" in refusal(streams, team("other"), "10.0.0.1")
    streams.open(team("other"), "10.0.0.2")


def test_no_cap_on_an_address_where_the_instructor_says_so():
    streams = Streams(per_address=0)
    for i in range(40 * STREAMS_PER_TEAM):                   # a campus behind one NAT address
        streams.open(team(f"t{i // STREAMS_PER_TEAM}"), "10.0.0.1")


def test_the_instructor_has_a_cap_of_its_own():
    streams = Streams(instructor=2)
    opened(streams, 2, Principal("instructor", "instructor"), "10.0.0.1")
    assert "the instructor already has 2" in refusal(streams, Principal("instructor", "instructor"), "10.0.0.2")


class Past:
    """A service whose database refuses a team past its hourly limit, for ``wait`` more seconds."""

    db, settings = None, type("Settings", (), {"rules": None})

    def __init__(self, wait):
        self.wait, self.asked = wait, 0

    async def run(self, fn, *args):
        self.asked += 1
        raise Refused(429, "past the hourly limit", retry_after=self.wait, holds=self.wait)


def test_a_kept_refusal_says_the_refusal_s_own_wait_not_how_long_it_is_kept():
    async def main():
        refusals, service = Refusals(longest=60.0), Past(3540)
        answers = []
        for _ in range(3):
            with pytest.raises(Refused) as caught:
                await refusals.admit(service, "red", "development", None, None, {})
            answers.append(caught.value.retry_after)
        return answers, service.asked
    answers, asked = asyncio.run(main())
    assert asked == 1                                        # the second and third from memory
    assert all(3538 <= a <= 3540 for a in answers), answers
