"""A smoke check as JUnit XML (Ant/Jenkins schema; docs/notes/remote-and-ci.md section 5.2): one
<testsuite> per host, its <properties> the package versions and GPU facts, a test case per
check (<failure> about the server, <error> for infrastructure, <skipped> when an earlier check
failed; <system-out> the server log's tail). Drawn from `RunModel.smoke` (the run's journal)
or any `SmokeView`."""
from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from typing import Final

from ddprobe.report.smoke import SmokeView
from ddprobe.untrusted import first_chars, for_xml

JUNIT_MESSAGE_CAP: Final = 500  # characters of a JUnit failure's message (its text has all)


def junit_xml(rep: SmokeView) -> str:
    """JUnit XML (Ant/Jenkins schema) for the report: one test suite per host."""
    root = ET.Element("testsuites", name="ddprobe smoke")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for hs in rep.hosts:
        counts = {"tests": len(hs.cases),
                  "failures": sum(c.status == "failure" for c in hs.cases),
                  "errors": sum(c.status == "error" for c in hs.cases),
                  "skipped": sum(c.status == "skipped" for c in hs.cases)}
        for k, n in counts.items():
            totals[k] += n
        suite = ET.SubElement(root, "testsuite", {
            "name": hs.host, "time": f"{hs.time:.3f}", "timestamp": hs.timestamp,
            "hostname": socket.gethostname(), **{k: str(n) for k, n in counts.items()}})
        props = ET.SubElement(suite, "properties")
        for k, v in sorted(hs.properties.items()):
            ET.SubElement(props, "property", name=k, value=str(v))
        for c in hs.cases:
            tc = ET.SubElement(suite, "testcase", classname=c.classname, name=c.name,
                               time=f"{c.time:.3f}")
            if c.status in ("failure", "error"):
                el = ET.SubElement(tc, c.status, message=first_chars(c.message, JUNIT_MESSAGE_CAP),
                                   type=c.type or c.status)
                el.text = c.message
            elif c.status == "skipped":
                ET.SubElement(tc, "skipped", message=first_chars(c.message, JUNIT_MESSAGE_CAP))
            if c.output:
                ET.SubElement(tc, "system-out").text = c.output
    for k, n in totals.items():
        if k != "skipped":  # junit-10.xsd allows `skipped` on a testsuite, not on testsuites
            root.set(k, str(n))
    root.set("time", f"{rep.wall_s:.3f}")
    for el in root.iter():  # host text everywhere: XML 1.0 forbids most control characters
        if el.text:
            el.text = for_xml(el.text)
        for k, v in el.attrib.items():
            el.set(k, for_xml(v))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
