"""The console's Create page from a container image, in Chromium against a real `lockgate
dev` (tests/console_fixtures.py): the page makes the template (POST /v1/templates), then the
endpoint with its templateId; dev mode runs the template's start command (not the image) as
local workers, so the endpoint becomes Ready and a job through its job API completes."""

from __future__ import annotations

import re

import requests

from console_browser import PHONE, assert_clean, screenshot, sign_in
from devproc import DevProcess
from tests.conftest import wait_until

pytest_plugins = ["console_fixtures"]

ECHO = "examples/echo/handler.py"
EXPECTED = ("400",)  # a validation error is a logged 400


def expect(locator):
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def auth(dev: DevProcess) -> dict[str, str]:
    return {"authorization": f"Bearer {dev.key}"}


def get(dev: DevProcess, path: str) -> requests.Response:
    return requests.get(f"{dev.url}{path}", headers=auth(dev), timeout=10)


def post(dev: DevProcess, path: str, body: dict) -> dict:
    answer = requests.post(f"{dev.url}{path}", json=body, headers=auth(dev), timeout=30)
    assert answer.status_code in (200, 201), answer.text
    return answer.json()


def open_create(page, dev: DevProcess) -> None:
    sign_in(page, dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{dev.url}/console/#/new")


def test_create_from_an_image_makes_the_template_then_a_ready_endpoint(page, console_dev):
    volume = post(console_dev, "/v1/networkvolumes", {"name": "models", "size": 5})
    credential = post(
        console_dev,
        "/v1/containerregistryauth",
        {"name": "ghcr", "username": "bot", "password": "s3cret-pass"},
    )
    open_create(page, console_dev)
    page.get_by_label("Endpoint id").fill("from-image")
    page.get_by_label("Name", exact=True).fill("Echo from an image")
    page.get_by_label("A container image").check()
    expect(page.get_by_label("Template, handler file or command")).to_be_hidden()
    note = page.locator(".image-source .dev-mode-note", has_text="does not pull")
    expect(note).to_contain_text("each worker is a local process")
    page.get_by_label("Container image", exact=True).fill("registry.example.com/echo:1")
    page.get_by_label("Start command").fill(f"python -u {ECHO}")
    page.get_by_label("HTTP ports").fill("8000/http, bad")
    page.get_by_label("Variable 1 name").fill("GREETING")
    page.get_by_label("Variable 1 value").fill("hello there")
    page.get_by_label("Container disk (GiB)").fill("30")
    page.get_by_label("Registry credential").select_option(credential["id"])
    page.get_by_label("Network volume").select_option(volume["id"])
    expect(page.get_by_label("Registry credential")).not_to_contain_text("s3cret-pass")
    page.get_by_label("HTTP ports").fill("8000/http")
    screenshot(page, "create-from-image-filled")  # docs/images/console-create.png
    page.get_by_label("HTTP ports").fill("8000/http, bad")

    # the template API's field error shows under the field it names; nothing is made
    page.get_by_role("button", name="Create endpoint").click()
    ports_error = page.locator('[data-field="ports"] .field-error')
    expect(ports_error).to_contain_text("ports.1")
    expect(page.get_by_label("HTTP ports")).to_have_attribute("aria-invalid", "true")
    assert get(console_dev, "/v1/templates").json() == []

    # the endpoint API's error after a made template: the template is deleted again
    page.get_by_label("HTTP ports").fill("8000/http")
    page.get_by_label("Endpoint id").fill("Not_A_Label")
    page.get_by_role("button", name="Create endpoint").click()
    expect(page.locator('[data-field="id"] .field-error')).to_contain_text("id")
    expect(ports_error).to_have_count(0)
    assert get(console_dev, "/v1/templates").json() == []
    assert [e["id"] for e in get(console_dev, "/v1/endpoints").json()] == ["echo"]
    screenshot(page, "create-from-image")

    # the Model field is sent as modelReferences; the API's 400 shows under it
    page.get_by_label("Model", exact=True).fill("org/model:main\nnot a model")
    page.get_by_label("Endpoint id").fill("from-image")
    page.get_by_role("button", name="Create endpoint").click()
    expect(page.locator('[data-field="modelReferences"] .field-error')).to_contain_text(
        "modelReferences"
    )
    expect(page.get_by_label("Model", exact=True)).to_have_attribute("aria-invalid", "true")
    assert get(console_dev, "/v1/templates").json() == []
    screenshot(page, "create-model-error")
    page.get_by_label("Model", exact=True).fill("")

    page.get_by_label("Workers min").fill("1")
    page.get_by_role("button", name="Create endpoint").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Created from-image", timeout=90_000)
    [template] = get(console_dev, "/v1/templates").json()
    assert template["name"] == "Echo from an image"
    assert template["imageName"] == "registry.example.com/echo:1"
    assert template["dockerStartCmd"] == ["python", "-u", ECHO]
    assert template["dockerEntrypoint"] == []
    assert template["env"] == {"GREETING": "hello there"}
    assert (template["ports"], template["containerDiskInGb"]) == (["8000/http"], 30)
    assert template["containerRegistryAuthId"] == credential["id"]
    endpoint = get(console_dev, "/v1/endpoints/from-image").json()
    assert endpoint["templateId"] == template["id"]
    assert endpoint["networkVolumeId"] == volume["id"]
    # the Edit page shows the template's fields and links to it
    page.goto(f"{console_dev.url}/console/#/endpoints/from-image/edit")
    summary = page.get_by_role("region", name="Template: Echo from an image")
    expect(summary.get_by_label("Container image")).to_have_value("registry.example.com/echo:1")
    expect(summary.get_by_label("Start command")).to_have_value(f"python -u {ECHO}")
    expect(summary.get_by_label("Variable 1 name")).to_have_value("GREETING")
    link = summary.get_by_role("link", name="Every field of the template")
    assert link.get_attribute("href") == f"#/templates/{template['id']}"
    screenshot(page, "edit-template-summary")
    # Edit: the Model field, one per line or comma separated, in the review's diff
    page.get_by_label("Model", exact=True).fill("org/model:main, other/model\nthird/one")
    page.get_by_role("button", name="Review changes").click()
    rows = page.locator("table.diff tbody tr")
    expect(rows).to_have_count(1)  # nothing else changed: the record's [] is the field's ""
    expect(rows).to_contain_text("modelReferences")
    expect(rows.locator("td.new")).to_have_text("org/model:main, other/model, third/one")
    screenshot(page, "edit-model-diff")
    page.get_by_role("button", name="Back").click()
    # the start command really runs: a job through the job API completes
    answer = requests.post(
        f"{console_dev.url}/v2/from-image/runsync",
        json={"input": {"ping": 1}},
        headers=auth(console_dev),
        timeout=120,
    ).json()
    assert answer["status"] == "COMPLETED", answer
    assert_clean(page, allow=EXPECTED)


def test_create_from_an_image_fits_a_phone(page, console_dev):
    page.set_viewport_size(PHONE)
    open_create(page, console_dev)
    page.get_by_label("A container image").check()
    expect(page.get_by_label("Container image", exact=True)).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    screenshot(page, "create-from-image-phone")
    assert_clean(page)


def test_templates_page_lists_edits_and_deletes_a_template(page, console_dev):
    template = post(
        console_dev,
        "/v1/templates",
        {
            "name": "Page echo",
            "imageName": "registry.example.com/page:1",
            "dockerStartCmd": ["python", "-u", ECHO],
            "env": {"MODE": "one"},
        },
    )
    post(console_dev, "/v1/endpoints", {"id": "uses-tpl", "templateId": template["id"]})
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Templates").click()
    row = page.locator(f'tr[data-template="{template["id"]}"]')
    expect(row).to_contain_text("registry.example.com/page:1")
    expect(row.locator('[data-label="Used by"]')).to_have_text("1 endpoint")
    screenshot(page, "templates")
    row.get_by_role("link", name="Page echo").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Page echo")
    expect(page.get_by_label("Start command")).to_have_value(f"python -u {ECHO}")
    expect(page.get_by_label("Variable 1 name")).to_have_value("MODE")

    # a field error from PATCH shows under its field; nothing changes
    page.get_by_label("HTTP ports").fill("nonsense")
    page.get_by_role("button", name="Save").click()
    expect(page.locator('[data-field="ports"] .field-error')).to_contain_text("ports.0")
    page.get_by_label("HTTP ports").fill("8000/http")
    page.get_by_label("Name", exact=True).fill("Page echo 2")
    page.get_by_label("Variable 1 value").fill("two")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#toast")).to_have_text(f"Saved {template['id']}")
    saved = get(console_dev, f"/v1/templates/{template['id']}").json()
    assert (saved["name"], saved["env"], saved["ports"]) == (
        "Page echo 2",
        {"MODE": "two"},
        ["8000/http"],
    )
    assert saved["dockerStartCmd"] == ["python", "-u", ECHO]

    # in use: the API's 409 naming the endpoint is shown; once unused, Delete deletes it
    page.get_by_role("button", name="Delete Page echo").click()
    expect(page.get_by_role("alert")).to_contain_text("uses-tpl")
    screenshot(page, "template-edit")
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    screenshot(page, "template-edit-phone")
    gone = requests.delete(f"{console_dev.url}/v1/endpoints/uses-tpl", headers=auth(console_dev))
    assert gone.status_code == 204, gone.text
    page.get_by_role("button", name="Delete Page echo").click()
    expect(page).to_have_url(re.compile(r"#/templates$"))
    assert get(console_dev, f"/v1/templates/{template['id']}").status_code == 404
    assert_clean(page, allow=("400", "409"))


def test_a_templates_credential_is_chosen_from_a_list_and_cannot_be_deleted_while_used(
    page, console_dev
):
    first, second = (
        post(
            console_dev, "/v1/containerregistryauth", {"name": n, "username": "u", "password": "p"}
        )
        for n in ("cred-one", "cred-two")
    )
    template = post(
        console_dev,
        "/v1/templates",
        {
            "name": "With credential",
            "imageName": "registry.example.com/private:1",
            "containerRegistryAuthId": first["id"],
        },
    )
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/templates/{template['id']}")
    credential = page.get_by_label("Registry credential")
    expect(credential).to_have_value(first["id"])
    expect(credential.locator("option:checked")).to_have_text("cred-one (u @ docker.io)")
    expect(credential.locator("option")).to_contain_text(
        ["none", "cred-one (u @ docker.io)", "cred-two (u @ docker.io)"]
    )
    credential.select_option(second["id"])
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#toast")).to_have_text(f"Saved {template['id']}")
    saved = get(console_dev, f"/v1/templates/{template['id']}").json()
    assert saved["containerRegistryAuthId"] == second["id"]
    screenshot(page, "template-credential")

    # the Credentials page shows the API's 409 naming the template; the credential stays
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Credentials").click()
    row = page.locator(f'tr[data-id="{second["id"]}"]')
    row.get_by_role("button", name="Delete cred-two").click()
    row.get_by_role("button", name="Delete cred-two").click()  # the confirmation
    expect(row.get_by_role("alert")).to_contain_text(template["id"])
    screenshot(page, "credential-in-use")
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    screenshot(page, "credential-in-use-phone")
    assert get(console_dev, f"/v1/containerregistryauth/{second['id']}").status_code == 200

    # "none" clears it; then the credential can go
    page.goto(f"{console_dev.url}/console/#/templates/{template['id']}")
    page.get_by_label("Registry credential").select_option("")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#toast")).to_have_text(f"Saved {template['id']}")
    # the toast may still be the first save's: the API tells when this one landed
    wait_until(
        lambda: (
            not get(console_dev, f"/v1/templates/{template['id']}")
            .json()
            .get("containerRegistryAuthId")
        ),
        "the credential cleared",
    )
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Credentials").click()
    row.get_by_role("button", name="Delete cred-two").click()
    row.get_by_role("button", name="Delete cred-two").click()
    expect(row).to_have_count(0)
    assert get(console_dev, f"/v1/containerregistryauth/{second['id']}").status_code == 404
    assert_clean(page, allow=("409",))


def test_registry_credentials_page_creates_lists_and_deletes_never_showing_the_password(
    page, console_dev
):
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Credentials").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Registry credentials")
    page.get_by_role("button", name="Create registry credential").click()  # empty: the API says
    expect(page.locator(".field-error")).to_have_count(1)
    page.get_by_label("Name", exact=True).fill("quay-bot")
    page.get_by_label("User name").fill("robot")
    page.get_by_label("Password or token").fill("pa55-never-shown")
    page.get_by_label("Registry (optional)").fill("quay.io")
    page.get_by_role("button", name="Create registry credential").click()
    expect(page.locator("tr", has_text="quay-bot")).to_have_count(1)
    made = [
        c for c in get(console_dev, "/v1/containerregistryauth").json() if c["name"] == "quay-bot"
    ]
    assert len(made) == 1 and made[0]["username"] == "robot"
    row = page.locator(f'tr[data-id="{made[0]["id"]}"]')
    expect(row).to_contain_text("quay.io")
    expect(page.get_by_label("Password or token")).to_have_value("")
    assert "pa55-never-shown" not in page.content()
    screenshot(page, "credentials")
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    screenshot(page, "credentials-phone")
    row.get_by_role("button", name="Delete quay-bot").click()
    page.get_by_role("button", name="Delete quay-bot").click()  # the confirmation
    expect(row).to_have_count(0)
    assert get(console_dev, f"/v1/containerregistryauth/{made[0]['id']}").status_code == 404
    assert_clean(page, allow=EXPECTED)


def test_network_volumes_page_creates_lists_and_refuses_deleting_one_in_use(page, console_dev):
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Volumes").click()
    page.get_by_label("Name", exact=True).fill("weights")
    page.get_by_label("Size (GiB)").fill("0")
    page.get_by_role("button", name="Create network volume").click()
    expect(page.locator('[data-field="size"] .field-error')).to_contain_text("size")
    page.get_by_label("Size (GiB)").fill("7")
    page.get_by_role("button", name="Create network volume").click()
    expect(page.locator("tr", has_text="weights")).to_have_count(1)
    [volume] = [v for v in get(console_dev, "/v1/networkvolumes").json() if v["name"] == "weights"]
    assert volume["size"] == 7
    row = page.locator(f'tr[data-id="{volume["id"]}"]')
    expect(row).to_contain_text("7 GiB")
    post(
        console_dev,
        "/v1/endpoints",
        {"id": "uses-volume", "templateId": ECHO, "networkVolumeId": volume["id"]},
    )
    row.get_by_role("button", name="Delete weights").click()
    page.get_by_role("button", name="Delete weights").click()
    expect(row.get_by_role("alert")).to_contain_text("uses-volume")
    screenshot(page, "volumes")
    assert get(console_dev, f"/v1/networkvolumes/{volume['id']}").status_code == 200
    assert_clean(page, allow=(*EXPECTED, "409"))


def run_in_console(page, dev: DevProcess, endpoint: str, body: str) -> str:
    """Send `body` with the Requests tab's runner; the output once the job COMPLETED."""
    page.goto(f"{dev.url}/console/#/endpoints/{endpoint}/requests")
    page.get_by_label("Request body (JSON)").fill(body)
    page.get_by_role("button", name="Run", exact=True).click()
    page.locator(".live-job .badge", has_text=re.compile("^COMPLETED$")).wait_for(timeout=90_000)
    return page.get_by_label("Output", exact=True).inner_text()


def test_from_an_image_to_a_request_an_env_edit_and_a_delete_all_in_the_console(page, console_dev):
    """Issue 34's browser path: create from an image, send a test request, edit the env
    (new workers show it), delete the endpoint, then its template."""
    open_create(page, console_dev)
    page.get_by_label("Endpoint id").fill("env-flow")
    page.get_by_label("Name", exact=True).fill("Env flow")
    page.get_by_label("A container image").check()
    page.get_by_label("Container image", exact=True).fill("registry.example.com/env-echo:1")
    page.get_by_label("Start command").fill("python -u tests/handlers/env_echo.py")
    page.get_by_label("Variable 1 name").fill("GREETING")
    page.get_by_label("Variable 1 value").fill("first")
    page.get_by_role("button", name="Create endpoint").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Created env-flow", timeout=90_000)
    body = '{"input": {"names": ["GREETING"]}}'
    assert '"GREETING": "first"' in run_in_console(page, console_dev, "env-flow", body)

    # the env, edited on the endpoint's template page, reaches the new workers
    template_id = get(console_dev, "/v1/endpoints/env-flow").json()["templateId"]
    page.goto(f"{console_dev.url}/console/#/templates/{template_id}")
    page.get_by_label("Variable 1 value").fill("second")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#toast")).to_have_text(f"Saved {template_id}")

    def greeting() -> bool:  # the old worker may take a job while it is replaced
        answer = requests.post(
            f"{console_dev.url}/v2/env-flow/runsync",
            json={"input": {"names": ["GREETING"]}},
            headers=auth(console_dev),
            timeout=90,
        ).json()
        return answer.get("output", {}).get("env", {}).get("GREETING") == "second"

    wait_until(greeting, "a worker with the new env", timeout=90)
    assert '"GREETING": "second"' in run_in_console(page, console_dev, "env-flow", body)
    screenshot(page, "image-flow-request")

    # delete the endpoint (typing its id), then the template it no longer uses
    page.goto(f"{console_dev.url}/console/#/endpoints/env-flow/edit")
    page.get_by_label("Type env-flow to confirm").fill("env-flow")
    page.get_by_role("button", name="Delete endpoint").click()
    page.wait_for_url(re.compile(r"#/endpoints$"))
    assert get(console_dev, "/v1/endpoints/env-flow").status_code == 404
    page.goto(f"{console_dev.url}/console/#/templates/{template_id}")
    page.get_by_role("button", name="Delete Env flow").click()
    expect(page).to_have_url(re.compile(r"#/templates$"))
    assert get(console_dev, f"/v1/templates/{template_id}").status_code == 404
    assert_clean(page, allow=EXPECTED)


def test_a_templates_secret_references_are_rows_of_their_own_and_round_trip(page, console_dev):
    """`secretEnv` shows as rows whose value is "secret-name/key" (a Template made through
    the API: dev mode resolves no Secret, so its Create offers plain values only)."""
    template = post(
        console_dev,
        "/v1/templates",
        {
            "name": "With a secret",
            "imageName": "registry.example.com/s:1",
            "env": {"MODE": "one"},
            "secretEnv": {"HF_TOKEN": {"name": "hf", "key": "token"}},
        },
    )
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/templates/{template['id']}")
    expect(page.get_by_label("Variable 2 from")).to_have_value("secret")
    expect(page.get_by_label("Variable 2 Secret/key")).to_have_value("hf/token")
    page.get_by_label("Variable 2 Secret/key").fill("hf-v2/read-token")
    page.get_by_role("button", name="Save").click()
    wait_until(
        lambda: (
            get(console_dev, f"/v1/templates/{template['id']}").json()["secretEnv"]
            == {"HF_TOKEN": {"name": "hf-v2", "key": "read-token"}}
        ),
        "the Secret reference saved",
    )
    screenshot(page, "template-secret-env")
    page.get_by_label("Variable 2 from").select_option("")  # a plain value now
    page.get_by_label("Variable 2 value").fill("hf_plain")
    page.get_by_role("button", name="Save").click()
    wait_until(
        lambda: (
            (t := get(console_dev, f"/v1/templates/{template['id']}").json())["secretEnv"] == {}
            and t["env"] == {"MODE": "one", "HF_TOKEN": "hf_plain"}
        ),
        "the variable a plain value",
    )
    # a Secret reference without its key: the API's 400 under the variables
    page.get_by_label("Variable 2 from").select_option("secret")
    page.get_by_label("Variable 2 Secret/key").fill("no-key")
    page.get_by_role("button", name="Save").click()
    expect(page.locator('[data-field="secretEnv"] .field-error')).to_contain_text("secretEnv")
    # Create in dev mode: plain values only, and it says why
    page.goto(f"{console_dev.url}/console/#/new")
    page.get_by_label("A container image").check()
    expect(page.get_by_text("Secret references are read from Kubernetes Secrets")).to_be_visible()
    expect(page.get_by_label("Variable 1 from")).to_have_count(0)
    assert_clean(page, allow=EXPECTED)
