"""The results tables: one run per method, and many runs gathered with the paper's rows beside them."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from run_records import jobs_of

from mjfl.coordinator.results import paper
from mjfl.coordinator.results.outcomes import gather, summary
from mjfl.coordinator.results.tables import gathered_table, results_table
from mjfl.coordinator.storage.records import JobInfo
from mjfl.ids import JobId


def text_of(table: Table) -> str:
    console = Console(record=True, width=240, color_system=None)
    console.print(table)
    return console.export_text()


def rows_of(text: str) -> dict[str, list[str]]:
    """The table's rows by their first cell, each row's other cells stripped."""
    lines = [line for line in text.splitlines() if line.count("│") > 3]
    return {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]] for line in lines}


def test_results_table_renders_the_numbers(results: dict) -> None:
    table = results_table(summary(results), jobs_of("mg"))
    text = text_of(table)
    rows = rows_of(text)
    assert rows["meta-greedy"] == ["25.0", "0.8500", "30.0", "0.9700", "30.0", "4.00x"]
    assert rows["fedcs"] == ["—", "0.7000", "20.0", "0.9000", "—", "—"]
    assert "1.00x" in rows["random"] and "1.33x" in rows["greedy"]
    assert "fastest group: meta-greedy, 4.00x faster than random" in text
    assert "acc >= 0.8" in text and "loss <= 0.3" in text
    # The best of each column is highlighted, and only that cell.
    cnn_time = list(table.columns[1].cells)
    assert cnn_time[0] == "[bold green]25.0[/]"
    assert not any("bold" in str(cell) for cell in cnn_time[1:])
    lenet_time = list(table.columns[3].cells)
    assert lenet_time[3] == "[bold green]20.0[/]"  # fedcs is fastest on lenet


def test_the_caption_compares_only_what_can_be_compared(results: dict) -> None:
    # One method: nothing to compare it with (not "random, 1.00x faster than random").
    alone = {"random": results["random"]}
    assert results_table(summary(alone), jobs_of("rnd")).caption is None
    # The baseline itself fastest: said so, without a speedup of 1.
    assert results_table(summary({"random": results["random"], "fedcs": results["fedcs"]}), jobs_of("mg")).caption == (
        "fastest group: random, the baseline"
    )


def test_a_long_method_name_stays_whole_in_a_narrow_terminal(results: dict) -> None:
    named = {"meta-greedy-paper-selector": results["meta-greedy"], "random": results["random"]}
    console = Console(record=True, width=100, color_system=None)
    console.print(results_table(summary(named), jobs_of("mg")))
    rows = rows_of(console.export_text())
    assert rows["meta-greedy-paper-selector"][0] == "25.0"  # the headers wrap, the name and figures stay


def test_results_table_without_random_has_no_speedup(results: dict) -> None:
    del results["random"]
    table = results_table(summary(results), jobs_of("mg"))
    assert [str(c.header).split("\n")[0] for c in table.columns][-1] == "group"
    assert table.caption is None


def test_gathered_table_shows_spread_partial_reach_speedup_and_member_shares(results: dict) -> None:
    gathered = {
        "methods": {
            "random": gather([results["random"], results["random"]], seeds=[0, 1]),
            "meta-greedy": gather([results["meta-greedy"], results["fedcs"]], seeds=[0, 1]),
        },
        "paper": paper.figures_for({}, {}),
    }
    text = text_of(gathered_table(gathered, jobs_of("mg"), title="both: "))
    rows = rows_of(text)
    assert "both: Time to target accuracy, mean ± sd over runs (seeds 0, 1)" in text
    assert rows["random"] == ["2", "60.0 ± 0.0", "0.8100", "120.0 ± 0.0", "0.9500", "120.0 ± 0.0", "1.00x"]
    # fedcs's records never reach cnn's target: a mean of the one run that did, and 1/2;
    # no group mean in every run, so no speedup.
    assert rows["meta-greedy"] == ["2", "25.0 (1/2)", "0.7750", "25.0 ± 7.1", "0.9350", "30.0 (1/2)", ""]
    assert "meta-greedy kept the plan of bods 67%, greedy 33%" in text
    assert "(paper)" not in text


def test_gathered_table_puts_the_papers_rows_under_a_matching_job(results: dict) -> None:
    alexnet = JobInfo("r", JobId("cnn"), "alexnet", "mnist", 0.976, None, 40, "alexnet/mnist")
    gathered = {
        "methods": {"random": gather([results["random"]], seeds=[0])},
        "paper": paper.figures_for({"cnn": alexnet}, {"cnn": "noniid"}),
    }
    rows = rows_of(text_of(gathered_table(gathered, [alexnet])))
    assert [name for name in rows if name.endswith("(paper)")] == [f"{m} (paper)" for m in paper.METHODS]
    assert rows["Meta-Greedy (paper)"][:3] == ["", "2700.0", "0.9900"]
    assert rows["Greedy (paper)"][1] == f"{181.2 * 60:.1f}"
